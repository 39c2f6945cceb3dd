"""What shaping gives each node, read from the plan: its latency buckets and rates (NodeShape), the
per-destination delays of transport mode and the per-source delays of the delay line, and which of
the three modes applies latency on this run (`choose_mode`). The tc code that applies a NodeShape is
the package's `__init__`; this module needs no kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NETEM = "netem"
TRANSPORT = "transport"
DELAYLINE = "delayline"


@dataclass(frozen=True)
class Bucket:
    """Destinations that share one latency (rounded to the plan's bucket width)."""

    delay_ms: float
    jitter_ms: float
    loss: float
    destinations: tuple[str, ...]  # IPv4 addresses


@dataclass
class NodeShape:
    """Everything shaping needs to know about one node."""

    node_id: str
    up_bps: int
    down_bps: int
    buckets: list[Bucket] = field(default_factory=list)


def node_shape(plan: Any, node_id: str, address_of: dict[str, str]) -> NodeShape:
    """Group the node's contacts (the peers it may talk to) by the one-way latency the plan gives
    towards them."""
    node = plan.node(node_id)
    by_delay: dict[float, list[str]] = {}
    for peer in node.contacts or node.neighbours:
        by_delay.setdefault(plan.one_way_ms(node_id, peer), []).append(address_of[peer])
    buckets = [Bucket(d, plan.jitter_ms, plan.loss, tuple(sorted(a))) for d, a in sorted(by_delay.items())]
    return NodeShape(node_id, node.bandwidth_up, node.bandwidth_down, buckets)


def transport_delays(plan: Any, node_id: str) -> dict[str, float]:
    """Transport mode: the same buckets as per-destination delays (ms) for the node's transport."""
    node = plan.node(node_id)
    return {peer: plan.one_way_ms(node_id, peer) for peer in node.contacts or node.neighbours}


class ModeError(ValueError):
    """A shaping mode that cannot run here; the message says what to ask for instead."""


def choose_mode(asked: str, netem: tuple[bool, str], delay_line: Any, adapters: list[str]) -> tuple[str, str]:
    """The mode a run shapes latency with, and why: netem where the kernel has it, else the delay line,
    for every node implementation alike (one mechanism outside the nodes); transport mode only when
    asked for. A mode asked for is obeyed or refused (ModeError), never replaced. `netem` is the
    probe's answer; `delay_line()` probes the delay line, only when it is needed."""
    has_netem, why = netem
    if asked == NETEM and not has_netem:
        raise ModeError(f"--shaping netem was asked for, but {why}; use --shaping auto, delayline or transport")
    if asked == TRANSPORT and adapters:
        raise ModeError(f"--shaping transport delays in peerlab's node transport; {', '.join(adapters)} nodes "
                        "have none: use --shaping auto, delayline or netem")
    if asked == NETEM or (asked == "auto" and has_netem):
        return NETEM, why
    if asked == TRANSPORT:
        return TRANSPORT, f"asked for; {why}"
    ok, detail = delay_line()
    if not ok:
        way_out = "" if adapters else "; --shaping transport delays in peerlab's own nodes instead"
        raise ModeError(f"latency needs the delay line here ({why}), but {detail}{way_out}")
    return DELAYLINE, f"{why}; {detail}"


def ingress_delays(plan: Any, node_id: str, address_of: dict[str, str]) -> dict[str, float]:
    """Delay-line mode (orchestrator/shaping/delayline.py): the one-way latency (ms) of every packet
    the node receives, by its source address; the same latencies as the other modes."""
    node = plan.node(node_id)
    return {address_of[peer]: plan.one_way_ms(peer, node_id) for peer in node.contacts or node.neighbours}
