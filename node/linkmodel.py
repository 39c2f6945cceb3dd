"""The link behaviour peerlab adds on top of the kernel, shared by the node transport (real sockets)
and the discrete-event network (virtual time), so an emulated and a simulated run model links alike:
- dialling: a kept connection is redialled with exponential backoff, a connect times out;
- jitter: uniform, and it never reorders one direction of a connection (TCP keeps order);
- degradation (the fault timeline's `degrade`): per node access link, an added latency and a loss;
  a link's added latency is the sum of its two ends', its loss their combination with the plan's."""
from __future__ import annotations

import random

DIAL_BACKOFF_FIRST = 0.1   # s before the first redial of a failed dial
DIAL_BACKOFF_MAX = 2.0     # the backoff doubles up to this
DIAL_TIMEOUT = 5.0         # a connect that gets no answer (a dial into a partition) gives up after this
REDIAL_AFTER_CLOSE = 0.2   # s between a kept connection closing and its redial


def next_backoff(backoff: float) -> float:
    return min(backoff * 2, DIAL_BACKOFF_MAX)


def release_time(now: float, delay: float, jitter: float, rng: random.Random, last: float) -> float:
    """When a frame sent at `now` arrives (or leaves a delaying queue): after `delay` plus uniform jitter
    in [-jitter, jitter] (never below zero), and never before the previous frame of that direction."""
    if jitter:
        delay = max(0.0, delay + rng.uniform(-jitter, jitter))
    return max(last, now + delay)


class Degradations:
    """The access links the fault timeline has degraded: node -> (added latency s, loss)."""

    def __init__(self) -> None:
        self.by_node: dict[str, tuple[float, float]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_node)

    def set(self, node: str, delay_s: float, loss: float) -> None:
        """Degrade `node`'s access link (zeros restore it)."""
        if delay_s or loss:
            self.by_node[node] = (delay_s, loss)
        else:
            self.by_node.pop(node, None)

    def added_delay(self, a: str, b: str) -> float:
        get = self.by_node.get
        return get(a, (0.0, 0.0))[0] + get(b, (0.0, 0.0))[0]

    def loss(self, a: str, b: str, base: float) -> float:
        """The link's loss: the plan's `base` combined with both ends' degradation."""
        get = self.by_node.get
        return 1 - (1 - base) * (1 - get(a, (0.0, 0.0))[1]) * (1 - get(b, (0.0, 0.0))[1])
