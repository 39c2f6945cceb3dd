"""A link's condition as one typed value (`LinkShape`): what shaping gives a node's access link, at
deploy and while the fault timeline changes it. Its rates, the one-way latency towards each of its
contacts (grouped in buckets of one latency each), jitter and loss, a degradation's added latency,
jitter and loss, and the peers a partition cuts it off from.

`link_shapes` reads the planned shapes from a plan as a run dilated by k applies them (docs/dilation.md):
latencies and jitter times k, rates divided by k (`dilated_rate`); the plan itself stays in experiment
time. The plan carries them, made when first asked (`RunPlan.link_shapes`, not a field: neither
plan.json nor the manifest holds them). The fault timeline changes them
(orchestrator/faults/next_shapes.py); the shaper applies them (orchestrator/shaping/mechanisms.py, `apply_all`),
and so does the simulator, undilated (orchestrator/sim/engine.py).
May import: orchestrator.model's plan for its type only (plan.py imports this); never
orchestrator/run, shaping, sim or fidelity.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plan import RunPlan


@dataclass(frozen=True)
class LinkShape:
    """One node's access link, as shaping applies it (a dilated run's latencies x k, rates / k)."""

    node: str
    up_bps: int                       # what it sends (its uplink)
    down_bps: int                     # what it receives (the cap at the far end of its link)
    delays: tuple[tuple[float, tuple[str, ...]], ...] = ()  # (one-way ms, the peers at it) per bucket, ascending
    jitter_ms: float = 0.0
    loss: float = 0.0
    added_delay_ms: float = 0.0       # a degradation, both ways, on top of the delays
    added_jitter_ms: float = 0.0      # ... on top of the jitter
    added_loss: float = 0.0
    cut_from: frozenset[str] = frozenset()  # a partition: the peers across, until the heal

    @property
    def peers(self) -> tuple[str, ...]:
        """Every contact of the node (those it has a latency towards), bucket by bucket."""
        return tuple(p for _, peers in self.delays for p in peers)

    @cached_property
    def _delay_of(self) -> dict[str, float]:  # (a frozen dataclass: the cache goes in __dict__ all the same)
        return {p: delay for delay, peers in self.delays for p in peers}

    def delay_to(self, peer: str) -> float:
        """The one-way latency (ms) towards `peer`, one of its contacts: a lookup, since deploy asks it of
        every contact of every node (a scan of the buckets made that cubic in the nodes)."""
        try:
            return self._delay_of[peer]
        except KeyError:
            raise KeyError(f"{peer} is no contact of {self.node}") from None

    @property
    def planned(self) -> LinkShape:
        """The same link with no fault on it: no degradation, no partition."""
        return replace(self, added_delay_ms=0.0, added_jitter_ms=0.0, added_loss=0.0, cut_from=frozenset())

    @property
    def degradation(self) -> tuple[float, float, float]:
        """What a degradation adds to the link: latency (ms), loss and jitter (ms), all 0 for none (the
        order of node/linkmodel.py's `Degradation` and of what the delay line and the nodes are told)."""
        return self.added_delay_ms, self.added_loss, self.added_jitter_ms


def bucketed(ms: float, width: float) -> float:
    """A latency rounded to the bucket width (shaping gives a bucket per latency, not per peer)."""
    return round(round(ms / width) * width, 6)


def dilated_rate(bps: int, k: float) -> int:
    """A rate as a run dilated by k applies it: divided by k, at least 1 bit/s (0 stays 0: none)."""
    return max(1, round(bps / k)) if bps else 0


def link_shapes(plan: RunPlan, k: float) -> dict[str, LinkShape]:
    """Every node's planned link (node id -> shape, in the plan's order) on a run dilated by k. A
    contact's latency is the model's times k rounded to the bucket width times k (as `one_way_ms`
    rounds the plan's: the dilated bucket width rounds the dilated latency); jitter times k; loss as is."""
    width = plan.latency_bucket_ms * k
    shapes: dict[str, LinkShape] = {}
    for node in plan.nodes:
        row = plan.latency_ms[node.index]
        by_delay: dict[float, list[str]] = {}
        for peer in node.contacts or node.neighbours:
            by_delay.setdefault(bucketed(row[plan.node(peer).index] * k, width), []).append(peer)
        shapes[node.id] = LinkShape(node.id, dilated_rate(node.bandwidth_up, k), dilated_rate(node.bandwidth_down, k),
                                    tuple((d, tuple(peers)) for d, peers in sorted(by_delay.items())),
                                    plan.jitter_ms * k, plan.loss)
    return shapes
