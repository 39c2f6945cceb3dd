"""Link shaping: the one module that turns a node's slice of the plan into kernel traffic control.

Every backend uses it, through a pyroute2 handle opened in the node's network namespace (and one on
the far end of its link for the download cap). Per node, egress:

    root 1: htb (default 1:2)
     └─ 1:1   htb rate=up ceil=up                  the node's uplink
         ├─ 1:2    htb                             unmatched traffic: no added latency
         ├─ 1:10   htb ─ 10: netem delay=d0 ...    destinations whose one-way latency rounds to d0
         ├─ 1:11   htb ─ 11: netem delay=d1 ...    ...one class per latency bucket, not per peer
         └─ u32 filters (prio 2): ip dst <peer> -> its bucket's class

and on the switch side of its link (what the node can receive):

    root 1: htb (default 1:1)
     └─ 1:1   htb rate=down
         │  during a partition (fault timeline) only:
         ├─ 1:3   htb ─ 3: pfifo limit 0               the cut: every packet classified here is dropped
         └─ u32 filters (prio 1): ip src <node on another side> -> 1:3
Where no switch side is reachable (a pod: its veth's other end belongs to the cluster node), the
"switch side" is an ifb device in the node's own namespace that receives its incoming packets:

    eth0 ingress ffff: ─ u32 match all ─ mirred egress redirect ─> ifb0, with the tree above on ifb0

Degrading a node's bandwidth changes the rate of 1:1 (and the ceil of its children) on both trees
in place: nothing is rebuilt, queued packets stay queued.

Kernels without sch_netem (CI machines, WSL2, minimal cloud kernels) keep the HTB rate but no bucket
classes; the same latencies are then applied either by the delay line (`delayline.py`: every packet
a node receives is held in user space through NFQUEUE, for any node implementation; `ingress_delays`)
or, for peerlab's own nodes, as per-destination delays in the node transport (`transport_delays`).
Which mode ran is written in the manifest. `probe_netem` finds out; never assume.

The runner speaks to this module in operations (`egress_op`, `download_op`, ...: plain dicts) that
`apply` executes on a pyroute2 handle. A backend with the handle at hand (local namespaces) applies
them itself; a container backend sends the same list to the shaper entry point in the node's network
namespace (`python -m orchestrator.shaping`, NET_ADMIN only).
"""
from __future__ import annotations

import math
import os
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from pyroute2 import NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

MTU_FRAME = 1514
ETH_P_IP = 0x0800
NETEM = "netem"
BUCKET_PRIO, CUT_PRIO = 2, 1          # the partition's filters are looked at first
CUT_CLASS, CUT_QDISC = "1:3", "3:"
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
    """The mode a run shapes latency with, and why: netem where the kernel has it; without it, the
    delay line for runs with adapter nodes (they cannot delay in their transport) and peerlab's
    transport delays otherwise. A mode asked for is obeyed or refused (ModeError), never replaced.
    `netem` is the probe's answer; `delay_line()` probes the delay line, only when it is needed."""
    has_netem, why = netem
    if asked == NETEM and not has_netem:
        raise ModeError(f"--shaping netem was asked for, but {why}; use --shaping auto, delayline or transport")
    if asked == TRANSPORT and adapters:
        raise ModeError(f"--shaping transport delays in peerlab's node transport; {', '.join(adapters)} nodes "
                        "have none: use --shaping auto, delayline or netem")
    if asked == NETEM or (asked == "auto" and has_netem):
        return NETEM, why
    if asked == TRANSPORT or (asked == "auto" and not adapters):
        return TRANSPORT, why
    ok, detail = delay_line()
    if not ok:
        raise ModeError(f"latency needs the delay line here ({why}), but {detail}")
    return DELAYLINE, f"{why}; {detail}"


def ingress_delays(plan: Any, node_id: str, address_of: dict[str, str]) -> dict[str, float]:
    """Delay-line mode (orchestrator/shaping/delayline.py): the one-way latency (ms) of every packet
    the node receives, by its source address; the same latencies as the other modes."""
    node = plan.node(node_id)
    return {address_of[peer]: plan.one_way_ms(peer, node_id) for peer in node.contacts or node.neighbours}


def htb_quantum(rate_bps: int) -> int:
    """Bytes a class may send per round: set explicitly, because HTB's default (rate / r2q) is far
    too large at tens of Mbit/s and the kernel warns; keep it between one frame and 60 kB."""
    return max(MTU_FRAME, min(60_000, rate_bps // 8 // 1000))


def netem_limit(rate_bps: int, delay_ms: float, jitter_ms: float) -> int:
    """Packets netem may hold: twice what the link carries during the delay, at least 1000
    (netem's default of 1000 drops packets once rate x delay exceeds it)."""
    in_flight = rate_bps / 8 * (delay_ms + jitter_ms) / 1000 / MTU_FRAME
    return max(1000, math.ceil(2 * in_flight))


def _rate(bps: int) -> str:
    return f"{bps}bit"


def _u32_dst(address: str) -> str:
    """u32 key matching an IPv4 destination address (offset 16 in the IP header)."""
    return f"0x{int.from_bytes(socket.inet_aton(address), 'big'):08x}/0xffffffff+16"


def _u32_src(address: str) -> str:
    """u32 key matching an IPv4 source address (offset 12 in the IP header)."""
    return f"0x{int.from_bytes(socket.inet_aton(address), 'big'):08x}/0xffffffff+12"


def clear(ipr: NetNS, ifname: str) -> None:
    index = ipr.link_lookup(ifname=ifname)[0]
    try:
        ipr.tc("del", index=index, handle="1:", root=True)
    except NetlinkError as err:
        if err.code not in (2, 22):  # nothing there to delete
            raise


def shape_egress(ipr: NetNS, ifname: str, shape: NodeShape, with_netem: bool) -> None:
    """Build the node's egress tree on `ifname` (see the module docstring)."""
    clear(ipr, ifname)
    index = ipr.link_lookup(ifname=ifname)[0]
    up = _rate(shape.up_bps)
    quantum = htb_quantum(shape.up_bps)
    ipr.tc("add", "htb", index=index, handle="1:", default=0x2)
    ipr.tc("add-class", "htb", index=index, handle="1:1", parent="1:", rate=up, ceil=up, quantum=quantum)
    buckets = shape.buckets if with_netem else []
    share = _rate(max(8000, shape.up_bps // (len(buckets) + 1)))
    ipr.tc("add-class", "htb", index=index, handle="1:2", parent="1:1", rate=share, ceil=up, quantum=quantum)
    for i, bucket in enumerate(buckets):
        minor = 0x10 + i
        ipr.tc("add-class", "htb", index=index, handle=f"1:{minor:x}", parent="1:1", rate=share, ceil=up,
               quantum=quantum)
        ipr.tc("add", "netem", index=index, parent=f"1:{minor:x}", handle=f"{minor:x}:",
               delay=int(bucket.delay_ms * 1000), jitter=int(bucket.jitter_ms * 1000),
               loss=bucket.loss * 100, limit=netem_limit(shape.up_bps, bucket.delay_ms, bucket.jitter_ms))
        for address in bucket.destinations:
            ipr.tc("add-filter", "u32", index=index, parent="1:", prio=BUCKET_PRIO, protocol=ETH_P_IP,
                   target=f"1:{minor:x}", keys=[_u32_dst(address)])


def cut_off(ipr: NetNS, ifname: str, sources: list[str]) -> None:
    """Partition, on the switch side of a node's link: drop every packet reaching the node from
    `sources` (class 1:3, a pfifo of 0 packets). Dropped in the network, not in the sender's own
    qdisc: its TCP sees plain loss and backs off, instead of the local-congestion errors that make
    Linux give a connection up within seconds."""
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.tc("add-class", "htb", index=index, handle=CUT_CLASS, parent="1:1", rate="8000bit", ceil="8000bit",
           quantum=MTU_FRAME)
    ipr.tc("add", "pfifo", index=index, parent=CUT_CLASS, handle=CUT_QDISC, limit=0)
    for address in sources:
        ipr.tc("add-filter", "u32", index=index, parent="1:", prio=CUT_PRIO, protocol=ETH_P_IP,
               target=CUT_CLASS, keys=[_u32_src(address)])


def reconnect(ipr: NetNS, ifname: str) -> None:
    """Heal: remove the partition's filters and its class (a no-op on a node that was not cut)."""
    index = ipr.link_lookup(ifname=ifname)[0]
    try:
        # handle 0 at a prio: the kernel removes every filter of that priority at once
        ipr.tc("del-filter", "u32", index=index, parent="1:", prio=CUT_PRIO, protocol=ETH_P_IP,
               target=CUT_CLASS, keys=[])
        ipr.tc("del-class", "htb", index=index, handle=CUT_CLASS, parent="1:1", rate="8000bit", ceil="8000bit")
    except NetlinkError as err:
        if err.code not in (2, 22):  # not partitioned
            raise


def set_rate(ipr: NetNS, ifname: str, bps: int) -> None:
    """Change the node's link rate in place (class 1:1; its children may borrow up to it)."""
    index = ipr.link_lookup(ifname=ifname)[0]
    rate, quantum = _rate(bps), htb_quantum(bps)
    ipr.tc("change-class", "htb", index=index, handle="1:1", parent="1:", rate=rate, ceil=rate, quantum=quantum)
    for c in ipr.get_classes(index=index):
        handle = _handle(c["handle"])
        if c["parent"] == 0x10001 and handle != CUT_CLASS:
            own = c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"] * 8
            ipr.tc("change-class", "htb", index=index, handle=handle, parent="1:1",
                   rate=_rate(max(8000, min(own, bps))), ceil=rate, quantum=quantum)


def shape_download(ipr: NetNS, ifname: str, down_bps: int) -> None:
    """Cap what the node receives: egress of the far end of its link, towards the node."""
    clear(ipr, ifname)
    index = ipr.link_lookup(ifname=ifname)[0]
    down = _rate(down_bps)
    ipr.tc("add", "htb", index=index, handle="1:", default=0x1)
    ipr.tc("add-class", "htb", index=index, handle="1:1", parent="1:", rate=down, ceil=down,
           quantum=htb_quantum(down_bps))


def redirect_ingress(ipr: NetNS, ifname: str, ifb: str) -> None:
    """Make `ifb` the far end of the link: every packet arriving on `ifname` leaves through `ifb`
    first, where `shape_download` and `cut_off` act on it as on a switch port."""
    if not ipr.link_lookup(ifname=ifb):
        ipr.link("add", ifname=ifb, kind="ifb")
    ifb_index = ipr.link_lookup(ifname=ifb)[0]
    ipr.link("set", index=ifb_index, state="up")
    index = ipr.link_lookup(ifname=ifname)[0]
    try:
        ipr.tc("del", "ingress", index=index, handle="ffff:")
    except NetlinkError as err:
        if err.code not in (2, 22):
            raise
    ipr.tc("add", "ingress", index=index, handle="ffff:")
    ipr.tc("add-filter", "u32", index=index, parent="ffff:", prio=1, protocol=ETH_P_IP, target="1:1",
           keys=["0x0/0x0+0"], action={"kind": "mirred", "direction": "egress", "action": "redirect",
                                       "ifindex": ifb_index})


def egress_op(ifname: str, shape: NodeShape, with_netem: bool) -> dict[str, Any]:
    return {"op": "egress", "ifname": ifname, "netem": with_netem, "shape": asdict(shape)}


def download_op(ifname: str, down_bps: int) -> dict[str, Any]:
    return {"op": "download", "ifname": ifname, "bps": down_bps}


def cut_op(ifname: str, sources: list[str]) -> dict[str, Any]:
    return {"op": "cut", "ifname": ifname, "sources": sources}


def heal_op(ifname: str) -> dict[str, Any]:
    return {"op": "heal", "ifname": ifname}


def rate_op(ifname: str, bps: int) -> dict[str, Any]:
    return {"op": "rate", "ifname": ifname, "bps": bps}


def ingress_op(ifname: str, ifb: str) -> dict[str, Any]:
    return {"op": "ingress", "ifname": ifname, "ifb": ifb}


def probe_op(kind: str) -> dict[str, Any]:
    """Can `kind` attach here? Tried on this namespace's loopback, removed at once."""
    return {"op": "probe", "kind": kind}


def _shape_from(d: dict[str, Any]) -> NodeShape:
    return NodeShape(d["node_id"], d["up_bps"], d["down_bps"],
                     [Bucket(b["delay_ms"], b["jitter_ms"], b["loss"], tuple(b["destinations"])) for b in d["buckets"]])


def apply(ipr: Any, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Execute shaping operations in order on `ipr` (a NetNS or IPRoute); what each one reports."""
    done = []
    for op in ops:
        kind, ifname = op["op"], op.get("ifname", "")
        if kind == "egress":
            shape_egress(ipr, ifname, _shape_from(op["shape"]), op["netem"])
        elif kind == "download":
            shape_download(ipr, ifname, op["bps"])
        elif kind == "cut":
            cut_off(ipr, ifname, op["sources"])
        elif kind == "heal":
            reconnect(ipr, ifname)
        elif kind == "rate":
            set_rate(ipr, ifname, op["bps"])
        elif kind == "ingress":
            redirect_ingress(ipr, ifname, op["ifb"])
        elif kind == "probe":
            ok, why = _try_qdisc(ipr, op["kind"])
            done.append({"op": kind, "ok": ok, "why": why})
            continue
        elif kind == "describe":
            done.append({"op": kind, "ifname": ifname, "lines": describe(ipr, ifname)})
            continue
        elif kind == "peer_index":  # the interface index of the far end of a veth (its IFLA_LINK)
            link = ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0]
            done.append({"op": kind, "ifname": ifname, "index": link.get_attr("IFLA_LINK")})
            continue
        else:
            raise ValueError(f"unknown shaping operation {kind!r}")
        done.append({"op": kind, "ifname": ifname})
    return done


def describe(ipr: NetNS, ifname: str) -> list[str]:
    """The qdiscs and classes on `ifname`, one line each (for tests and `peerlab doctor`)."""
    index = ipr.link_lookup(ifname=ifname)[0]
    lines = []
    for q in ipr.get_qdiscs(index=index):
        lines.append(f"qdisc {q.get_attr('TCA_KIND')} {q['handle'] >> 16:x}: parent {_handle(q['parent'])}")
    for c in ipr.get_classes(index=index):
        rate = c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"] * 8
        lines.append(f"class {c.get_attr('TCA_KIND')} {_handle(c['handle'])} parent {_handle(c['parent'])} rate {rate}bit")
    return lines


def _handle(h: int) -> str:
    return "root" if h == 0xFFFFFFFF else f"{h >> 16:x}:{h & 0xFFFF:x}"


def _probe_qdisc(kind: str, **options: Any) -> tuple[bool, str]:
    """Can this kernel attach a `kind` qdisc? Tried in a scratch namespace, so nothing is left behind."""
    name = f"plprobe{os.getpid()}"
    try:
        netns.create(name)
    except OSError as err:
        return False, f"cannot create a network namespace: {err}"
    try:
        with NetNS(name) as ns:
            return _try_qdisc(ns, kind, **options)
    finally:
        netns.remove(name)


PROBE_OPTIONS: dict[str, dict[str, Any]] = {"netem": {"delay": 1000}, "htb": {"default": 0x1}}


def _try_qdisc(ipr: Any, kind: str, **options: Any) -> tuple[bool, str]:
    """Attach a `kind` root qdisc to loopback and take it off again."""
    lo = ipr.link_lookup(ifname="lo")[0]
    try:
        ipr.tc("add", kind, index=lo, handle="1:", root=True, **(options or PROBE_OPTIONS.get(kind, {})))
    except NetlinkError as err:
        return False, f"sch_{kind} unavailable ({os.strerror(err.code)})"
    ipr.tc("del", index=lo, handle="1:", root=True)
    return True, f"sch_{kind} available"


def probe_netem() -> tuple[bool, str]:
    return _probe_qdisc("netem", delay=1000)


def probe_htb() -> tuple[bool, str]:
    return _probe_qdisc("htb", default=0x1)
