"""Shaping operations: one typed request for each thing done to a link's tc tree or to its namespace's
TCP (tcp_settings.py's sysctls), and for each thing asked of a delay line (`LineOp`: delayline.py), and
their wire format; nothing here runs them. tc.py's `apply` runs the first kind, on a pyroute2 handle
opened in the namespace they belong to, wherever the backend's access to the namespaces
(namespace_access.py) takes them: in process, or sent to the shaper entry point in the node's namespace
(`python -m orchestrator.shaping`) or to a cluster node's shaping daemon. A delay line's process (native)
runs the second kind. Those crossings are the only places they are plain data (`to_wire`, `from_wire`,
`wire`, `line_op`). Imports the standard library only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

Buckets = tuple[tuple[float, tuple[str, ...]], ...]  # (one-way ms, destination addresses), a bucket each


@dataclass(frozen=True)
class Op:
    """One operation on the interface `ifname` of a namespace; `op` names its kind on the wire."""
    op: ClassVar[str]
    ifname: str


@dataclass(frozen=True)
class Egress(Op):
    """The node's uplink tree: HTB at its rate, with a netem bucket per latency where netem runs (no
    buckets: latency is another mechanism's)."""
    op = "egress"
    up_bps: int
    buckets: Buckets = ()
    jitter_ms: float = 0.0
    loss: float = 0.0


@dataclass(frozen=True)
class Download(Op):
    """The download cap, on the far end of the node's link."""
    op = "download"
    bps: int


@dataclass(frozen=True)
class PrepareCut(Op):
    """The `partition`-th partition's filters for what reaches the node from `sources` (far end)."""
    op = "prepare_cut"
    sources: tuple[str, ...]
    partition: int


@dataclass(frozen=True)
class Cut(Op):
    """Partition: drop what its prepared filters pick out (far end)."""
    op = "cut"
    partition: int


@dataclass(frozen=True)
class Heal(Op):
    op = "heal"


@dataclass(frozen=True)
class Rate(Op):
    """A link's rate changed in place (a bandwidth degrade or its restore)."""
    op = "rate"
    bps: int


@dataclass(frozen=True)
class DegradeEgress(Op):
    """Netem mechanism: added latency, loss and jitter on every bucket of the node's uplink (zeros
    restore); the buckets' planned delays, jitter, loss and the planned rate as `Egress` made them."""
    op = "degrade_egress"
    up_bps: int
    delays_ms: tuple[float, ...]
    jitter_ms: float
    loss: float
    added_delay_ms: float
    added_loss: float
    added_jitter_ms: float = 0.0


@dataclass(frozen=True)
class DegradeIngress(Op):
    """Netem mechanism: a netem leaf on the far end's download class (zeros put the FIFO back)."""
    op = "degrade_ingress"
    bps: int
    delay_ms: float
    loss: float
    jitter_ms: float = 0.0


@dataclass(frozen=True)
class RedirectIngress(Op):
    """The pod layout: what arrives on `ifname` leaves through `ifb` first (its "far end")."""
    op = "ingress"
    ifb: str


@dataclass(frozen=True)
class Sent(Op):
    """What the node's link class has sent (bytes, packets), as the rate counts it."""
    op = "sent"


@dataclass(frozen=True)
class Counters(Op):
    """The interface's kernel counters: bytes and packets it transmitted and received (headers,
    handshakes and retransmissions included)."""
    op = "counters"


@dataclass(frozen=True)
class Describe(Op):
    """The qdiscs and classes on the interface, one line each."""
    op = "describe"


@dataclass(frozen=True)
class PeerIndex(Op):
    """The interface index of the far end of a veth (its IFLA_LINK)."""
    op = "peer_index"


@dataclass(frozen=True)
class Probe(Op):
    """Can a `kind` qdisc attach here? Tried on the namespace's loopback, removed at once."""
    op = "probe"
    ifname: str = "lo"
    kind: str = "netem"


@dataclass(frozen=True)
class Sysctls(Op):
    """The namespace's own sysctls (its TCP: the scenario's congestion control, a dilated run's minimum
    RTO), written through /proc/sys from inside it before its node opens a socket; each read back."""
    op = "sysctls"
    ifname: str = "lo"
    values: dict[str, str] = field(default_factory=dict)


KINDS: dict[str, type[Op]] = {cls.op: cls for cls in (Egress, Download, PrepareCut, Cut, Heal, Rate,
                                                       DegradeEgress, DegradeIngress, RedirectIngress, Sent,
                                                       Counters, Describe, PeerIndex, Probe, Sysctls)}


def wire(op: Op | LineOp) -> dict[str, Any]:
    """One operation as plain data: its kind's name, `op`, and its fields."""
    return {"op": op.op, **asdict(op)}


def to_wire(ops: list[Op]) -> list[dict[str, Any]]:
    return [wire(op) for op in ops]


def from_wire(items: list[dict[str, Any]]) -> list[Op]:
    """The operations a shaper entry point was sent; an unknown one is an error, not a no-op."""
    ops = []
    for item in items:
        cls = KINDS.get(item.get("op", ""))
        if cls is None:
            raise ValueError(f"unknown shaping operation {item.get('op')!r}")
        values = {f.name: item[f.name] for f in fields(cls) if f.name in item}
        if "buckets" in values:
            values["buckets"] = tuple((delay, tuple(addresses)) for delay, addresses in values["buckets"])
        for name in ("sources", "delays_ms"):
            if name in values:
                values[name] = tuple(values[name])
        ops.append(cls(**values))
    return ops


# the delay line's operations -------------------------------------------------------------------------
@dataclass(frozen=True)
class LineOp:
    """One request to a delay line (delayline.py), for all the namespaces it serves; `op` names it."""
    op: ClassVar[str]


@dataclass(frozen=True)
class LineLinks(LineOp):
    """Every node's address (node id -> address), and the run's jitter and loss on every link."""
    op = "links"
    ips: dict[str, str]
    jitter_ms: float = 0.0
    loss: float = 0.0


@dataclass(frozen=True)
class LineAttach(LineOp):
    """The node's ingress held by the line: its namespace file as the line sees it, its interface, and
    the one-way latency (ms) of what it receives, by source address."""
    op = "attach"
    netns: str
    ifname: str
    node: str
    delays_ms: dict[str, float]


@dataclass(frozen=True)
class LineDegrade(LineOp):
    """Latency (ms), loss and jitter (ms) added to the node's link, both ways, in place of any before
    (zeros: none)."""
    op = "degrade"
    node: str
    delay_ms: float = 0.0
    loss: float = 0.0
    jitter_ms: float = 0.0


@dataclass(frozen=True)
class LineStats(LineOp):
    """The line's counters so far: packets, drops, held, errors, and how late it released them."""
    op = "stats"


LINE_KINDS: dict[str, type[LineOp]] = {cls.op: cls for cls in (LineLinks, LineAttach, LineDegrade, LineStats)}


def line_op(item: dict[str, Any]) -> LineOp:
    """A delay line's operation from plain data (a cluster node's daemon gets them so); an unknown one is
    an error, not a no-op."""
    cls = LINE_KINDS.get(item.get("op", ""))
    if cls is None:
        raise ValueError(f"unknown delay line operation {item.get('op')!r}")
    return cls(**{f.name: item[f.name] for f in fields(cls) if f.name in item})
