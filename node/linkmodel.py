"""The link behaviour peerlab adds on top of the kernel, shared by the node transport (real sockets)
and the discrete-event network (virtual time), so an emulated and a simulated run model links alike:
- dialling: a kept connection is redialled with exponential backoff, a connect times out;
- jitter: uniform, and it never reorders one direction of a connection (TCP keeps order);
- degradation (the fault timeline's `degrade` and `jitter`): per node access link, an added latency,
  an added jitter and a loss; a link's added latency and jitter are the sums of its two ends' (on top
  of the plan's), its loss their combination with the plan's."""
from __future__ import annotations

import random
from typing import NamedTuple

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


class Degradation(NamedTuple):
    """What the fault timeline adds to one node's access link, both ways."""

    delay: float = 0.0   # s
    loss: float = 0.0
    jitter: float = 0.0  # s


NONE = Degradation()


class Degradations:
    """The access links the fault timeline has degraded: node -> its `Degradation`."""

    def __init__(self) -> None:
        self.by_node: dict[str, Degradation] = {}

    def __bool__(self) -> bool:
        return bool(self.by_node)

    def set(self, node: str, delay_s: float, loss: float, jitter_s: float = 0.0) -> None:
        """Degrade `node`'s access link (zeros restore it)."""
        if delay_s or loss or jitter_s:
            self.by_node[node] = Degradation(delay_s, loss, jitter_s)
        else:
            self.by_node.pop(node, None)

    def added_delay(self, a: str, b: str) -> float:
        get = self.by_node.get
        return get(a, NONE).delay + get(b, NONE).delay

    def added_jitter(self, a: str, b: str) -> float:
        get = self.by_node.get
        return get(a, NONE).jitter + get(b, NONE).jitter

    def loss(self, a: str, b: str, base: float) -> float:
        """The link's loss: the plan's `base` combined with both ends' degradation."""
        get = self.by_node.get
        return 1 - (1 - base) * (1 - get(a, NONE).loss) * (1 - get(b, NONE).loss)
