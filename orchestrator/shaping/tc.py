"""The kernel's traffic control for one node's link: every qdisc, class and filter peerlab makes.

Every backend uses it, through a pyroute2 handle opened in the node's network namespace (and one on
the far end of its link for the download cap). Per node, egress:

    root 1: htb (default 1:2)
     └─ 1:1   htb rate=up ceil=up                  the node's uplink
         ├─ 1:2    htb                             unmatched traffic: no added latency
         ├─ 1:10   htb ─ 10: netem delay=d0 ...    destinations whose one-way latency rounds to d0
         ├─ 1:11   htb ─ 11: netem delay=d1 ...    ...one class per latency bucket, not per peer
         └─ u32 filters (prio 2): ip dst <peer> -> its bucket's class

and on the switch side of its link (what the node can receive):

    root 1: htb (default 1:2)
     └─ 1:1   htb rate=down                        the node's downlink
         ├─ 1:2   htb rate=down ─ 2: pfifo limit=1000   everything the node receives
         │                    (4: netem delay=d jitter=j loss=l instead, in netem mode, while a degradation lasts)
         ├─ u32 filters (prio 1), from deploy, for the k-th partition of the timeline:
         │      ip src <node on another side> -> 1:30+k  (while that class does not exist, the kernel
         │      finds no class and sends the packet to the default, 1:2: nothing changes)
         └─ 1:30+k  htb ─ 30+k: pfifo limit 0      only while that partition lasts: the cut, every
                                                   packet classified here is dropped
Where no switch side is reachable (a pod: its veth's other end belongs to the cluster node), the
"switch side" is an ifb device in the node's own namespace that receives its incoming packets:

    eth0 ingress ffff: ─ u32 match all ─ mirred egress redirect ─> ifb0, with the tree above on ifb0

Every HTB class is given its quantum and bursts (`htb_quantum`, `htb_burst`); the rates count what
HTB counts: Ethernet frames with their headers (a full TCP segment is 1514 bytes on the wire for
1448 of payload, so a 50 Mbit/s link carries about 47.8 Mbit/s of TCP payload).

Degrading a node's bandwidth changes the rate of 1:1 (and the ceil of its children) on both trees
in place: nothing is rebuilt, queued packets stay queued. In netem mode, degrading its latency, jitter
and loss changes its buckets' netem qdiscs (what it sends) and puts a netem leaf under 1:2 on the switch
side (what it receives): the same "both ways, on top of the plan" as the delay line and the transport,
but for jitter on what it receives, which that leaf draws around the added delay alone (netem sends
what it draws below zero at once: without an added delay, half the packets get none, the others 0 to
the jitter).

Kernels without sch_netem keep the HTB trees without bucket classes; latency is then another
mechanism's (orchestrator/shaping/mechanisms.py). `probe_netem` finds out; never assume. Callers
reach these functions through typed operations (orchestrator/shaping/ops.py, which also cross into a
container's namespace as plain data): `apply` runs them here, on a handle in their namespace.
Imports ops.py and tcp_settings.py (a namespace's sysctls), pyroute2 and the standard library.
"""
from __future__ import annotations

import math
import os
import socket
from typing import Any, Sequence

from pyroute2 import NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

from orchestrator.shaping import ops, tcp_settings

MTU_FRAME = 1514
ETH_P_IP = 0x0800
BUCKET_PRIO, CUT_PRIO = 2, 1          # the partition's filters are looked at first
CUT_MINOR = 0x30                      # the k-th partition's class is 1:(0x30 + k)
# the switch side's leaf class, its queue, and the netem that replaces the queue while degraded
# (another handle: `replace` with the same handle would try to change a pfifo into a netem)
DOWN_CLASS, LEAF_QDISC, DEGRADE_QDISC = "1:2", "2:", "4:"
QUEUE_PACKETS = 1000
BURST_S = 0.002  # htb_burst: 2 ms of the rate (1 ms cost 2-3% of it in the netem guest; 5 ms, 0.3%)


def htb_quantum(rate_bps: int) -> int:
    """Bytes a class may send per round: set explicitly, because HTB's default (rate / r2q) is far
    too large at tens of Mbit/s and the kernel warns; keep it between one frame and 60 kB."""
    return max(MTU_FRAME, min(60_000, rate_bps // 8 // 1000))


def htb_burst(rate_bps: int) -> int:
    """Bytes a class may send at once after being idle: BURST_S of its rate, at least one frame.
    pyroute2's default (one MTU) is met on a host with fine timers but costs several per cent of the
    rate where timers fire late (a loaded host, a virtual machine)."""
    return max(MTU_FRAME, int(rate_bps / 8 * BURST_S))


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


def link_index(ipr: NetNS, ifname: str) -> int:
    """The interface's index in the handle's namespace; a missing one is named, not an IndexError."""
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise LookupError(f"no interface {ifname!r} in this network namespace")
    return found[0]


def clear(ipr: NetNS, ifname: str) -> None:
    index = link_index(ipr, ifname)
    try:
        ipr.tc("del", index=index, handle="1:", root=True)
    except NetlinkError as err:
        if err.code not in (2, 22):  # nothing there to delete
            raise


def _htb_class(ipr: Any, verb: str, index: int, handle: str, parent: str, rate_bps: int, ceil_bps: int) -> None:
    """Add or change one HTB class: rate, ceil, and the quantum and bursts they call for."""
    ipr.tc(verb, "htb", index=index, handle=handle, parent=parent, rate=_rate(rate_bps), ceil=_rate(ceil_bps),
           quantum=htb_quantum(ceil_bps), burst=htb_burst(rate_bps), cburst=htb_burst(ceil_bps))


def _netem(ipr: Any, verb: str, index: int, parent: str, handle: str, rate_bps: int, delay_ms: float,
           jitter_ms: float, loss: float) -> None:
    ipr.tc(verb, "netem", index=index, parent=parent, handle=handle, delay=int(delay_ms * 1000),
           jitter=int(jitter_ms * 1000), loss=loss * 100, limit=netem_limit(rate_bps, delay_ms, jitter_ms))


def shape_egress(ipr: NetNS, ifname: str, up_bps: int, buckets: Sequence[tuple[float, Sequence[str]]] = (),
                 jitter_ms: float = 0.0, loss: float = 0.0) -> None:
    """Build the node's egress tree on `ifname` (see the module docstring): `buckets`, (one-way ms,
    destination addresses) each, with the jitter and loss of every one; none where latency is another
    mechanism's."""
    clear(ipr, ifname)
    index = link_index(ipr, ifname)
    up = up_bps
    ipr.tc("add", "htb", index=index, handle="1:", default=0x2)
    _htb_class(ipr, "add-class", index, "1:1", "1:", up, up)
    share = max(8000, up // (len(buckets) + 1))
    _htb_class(ipr, "add-class", index, "1:2", "1:1", share, up)
    for i, (delay_ms, destinations) in enumerate(buckets):
        minor = f"{0x10 + i:x}"
        _htb_class(ipr, "add-class", index, f"1:{minor}", "1:1", share, up)
        _netem(ipr, "add", index, f"1:{minor}", f"{minor}:", up, delay_ms, jitter_ms, loss)
        for address in destinations:
            ipr.tc("add-filter", "u32", index=index, parent="1:", prio=BUCKET_PRIO, protocol=ETH_P_IP,
                   target=f"1:{minor}", keys=[_u32_dst(address)])


def degrade_egress(ipr: NetNS, ifname: str, up_bps: int, delays_ms: Sequence[float], jitter_ms: float, loss: float,
                   added_delay_ms: float, added_loss: float, added_jitter_ms: float = 0.0) -> None:
    """Netem mode's degradation of a node, its sending half: every latency bucket's netem (`delays_ms`,
    `jitter_ms`, `loss` and `up_bps` as `shape_egress` made it) gets `added_delay_ms` and
    `added_jitter_ms` more and `added_loss` on top (zeros restore the plan's), changed in place."""
    index = link_index(ipr, ifname)
    for i, delay_ms in enumerate(delays_ms):
        minor = f"{0x10 + i:x}"
        _netem(ipr, "change", index, f"1:{minor}", f"{minor}:", up_bps, delay_ms + added_delay_ms,
               jitter_ms + added_jitter_ms, 1 - (1 - loss) * (1 - added_loss))


def degrade_ingress(ipr: NetNS, ifname: str, down_bps: int, delay_ms: float, loss: float,
                    jitter_ms: float = 0.0) -> None:
    """Netem mode's degradation of a node, its receiving half, on the switch side of its link: the
    download class's leaf becomes a netem (delay, jitter, loss); zeros put the plain FIFO back."""
    index = link_index(ipr, ifname)
    if delay_ms or loss or jitter_ms:
        _netem(ipr, "replace", index, DOWN_CLASS, DEGRADE_QDISC, down_bps, delay_ms, jitter_ms, loss)
    else:
        _fifo(ipr, "replace", index)


def _fifo(ipr: Any, verb: str, index: int) -> None:
    """The download class's own queue: QUEUE_PACKETS, as a veth's (an ifb's default is 32 packets:
    too short for a link with tens of ms of latency, whose TCP would never fill the rate)."""
    ipr.tc(verb, "pfifo", index=index, parent=DOWN_CLASS, handle=LEAF_QDISC, limit=QUEUE_PACKETS)


def cut_class(partition: int) -> str:
    return f"1:{CUT_MINOR + partition:x}"


def prepare_cut(ipr: NetNS, ifname: str, sources: list[str], partition: int) -> None:
    """A partition's filters, on the switch side of a node's link, ahead of it: every packet reaching
    the node from `sources` is classified to the partition's class, which does not exist until the cut
    (so the default class takes it meanwhile). Made at deploy, so that the cut itself is one class per
    link (hundreds of filters took 2 s at 100 nodes on 2 cores, and the links were cut one by one)."""
    index = link_index(ipr, ifname)
    for address in sources:
        ipr.tc("add-filter", "u32", index=index, parent="1:", prio=CUT_PRIO, protocol=ETH_P_IP,
               target=cut_class(partition), keys=[_u32_src(address)])


def cut_off(ipr: NetNS, ifname: str, partition: int) -> None:
    """Partition: the partition's class (a pfifo of 0 packets) drops what its filters send it.
    Dropped in the network, not in the sender's own qdisc: its TCP sees plain loss and backs off,
    instead of the local-congestion errors that make Linux give a connection up within seconds."""
    index = link_index(ipr, ifname)
    handle = cut_class(partition)
    _htb_class(ipr, "add-class", index, handle, "1:1", 8000, 8000)
    ipr.tc("add", "pfifo", index=index, parent=handle, handle=f"{CUT_MINOR + partition:x}:", limit=0)


def _is_cut(handle: int) -> bool:
    return handle >> 16 == 1 and handle & 0xFFFF >= CUT_MINOR


def reconnect(ipr: NetNS, ifname: str) -> None:
    """Heal: remove the partitions' classes (a no-op on a node that was not cut); their filters stay,
    classifying to no class again."""
    index = link_index(ipr, ifname)
    for c in ipr.get_classes(index=index):
        if _is_cut(c["handle"]):
            ipr.tc("del-class", "htb", index=index, handle=_handle(c["handle"]), parent="1:1", rate="8000bit",
                   ceil="8000bit")


def set_rate(ipr: NetNS, ifname: str, bps: int) -> None:
    """Change the node's link rate in place (class 1:1; its children may borrow up to it)."""
    index = link_index(ipr, ifname)
    _htb_class(ipr, "change-class", index, "1:1", "1:", bps, bps)
    for c in ipr.get_classes(index=index):
        handle = _handle(c["handle"])
        if c["parent"] == 0x10001 and not _is_cut(c["handle"]):
            own = c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"] * 8
            _htb_class(ipr, "change-class", index, handle, "1:1", max(8000, min(own, bps)), bps)


def shape_download(ipr: NetNS, ifname: str, down_bps: int) -> None:
    """Cap what the node receives: egress of the far end of its link, towards the node. Its traffic
    goes to the leaf class 1:2, so that a partition's class beside it never turns the default class
    into an inner one (HTB would then pass the node's traffic unshaped)."""
    clear(ipr, ifname)
    index = link_index(ipr, ifname)
    ipr.tc("add", "htb", index=index, handle="1:", default=0x2)
    _htb_class(ipr, "add-class", index, "1:1", "1:", down_bps, down_bps)
    _htb_class(ipr, "add-class", index, DOWN_CLASS, "1:1", down_bps, down_bps)
    _fifo(ipr, "add", index)


def redirect_ingress(ipr: NetNS, ifname: str, ifb: str) -> None:
    """Make `ifb` the far end of the link: every packet arriving on `ifname` leaves through `ifb`
    first, where `shape_download` and `cut_off` act on it as on a switch port."""
    if not ipr.link_lookup(ifname=ifb):
        ipr.link("add", ifname=ifb, kind="ifb")
    ifb_index = link_index(ipr, ifb)
    ipr.link("set", index=ifb_index, state="up")
    index = link_index(ipr, ifname)
    try:
        ipr.tc("del", "ingress", index=index, handle="ffff:")
    except NetlinkError as err:
        if err.code not in (2, 22):
            raise
    ipr.tc("add", "ingress", index=index, handle="ffff:")
    ipr.tc("add-filter", "u32", index=index, parent="ffff:", prio=1, protocol=ETH_P_IP, target="1:1",
           keys=["0x0/0x0+0"], action={"kind": "mirred", "direction": "egress", "action": "redirect",
                                       "ifindex": ifb_index})


def link_sent(ipr: Any, ifname: str) -> dict[str, int]:
    """What the node's link class 1:1 has sent, as HTB counts it: every Ethernet frame with its
    headers (a GSO super-packet counts as the frames it becomes). What the configured rate is of."""
    index = link_index(ipr, ifname)
    for c in ipr.get_classes(index=index):
        if c["handle"] == 0x10001:
            basic = c.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")
            return {"bytes": basic["bytes"], "packets": basic["packets"]}
    raise ValueError(f"{ifname} has no shaped link (class 1:1)")


def describe(ipr: NetNS, ifname: str) -> list[str]:
    """The qdiscs and classes on `ifname`, one line each (for tests and `peerlab doctor`)."""
    index = link_index(ipr, ifname)
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
            return try_qdisc(ns, kind, **options)
    finally:
        netns.remove(name)


PROBE_OPTIONS: dict[str, dict[str, Any]] = {"netem": {"delay": 1000}, "htb": {"default": 0x1}}


def try_qdisc(ipr: Any, kind: str, **options: Any) -> tuple[bool, str]:
    """Attach a `kind` root qdisc to loopback and take it off again."""
    lo = link_index(ipr, "lo")
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


def apply(ipr: Any, todo: Sequence[ops.Op], netns: str | None = None) -> list[dict[str, Any]]:
    """Run typed operations (orchestrator/shaping/ops.py) in order on `ipr` (a NetNS or IPRoute opened
    in the namespace of the file `netns`; None: this process's); a result for each."""
    return [{"op": op.op, "ifname": op.ifname, **(run(ipr, op, netns) or {})} for op in todo]


def run(ipr: Any, op: ops.Op, netns: str | None = None) -> dict[str, Any] | None:
    """One operation, by its type; what it found, for those that read."""
    match op:
        case ops.Egress():
            shape_egress(ipr, op.ifname, op.up_bps, op.buckets, op.jitter_ms, op.loss)
        case ops.Download():
            shape_download(ipr, op.ifname, op.bps)
        case ops.PrepareCut():
            prepare_cut(ipr, op.ifname, list(op.sources), op.partition)
        case ops.Cut():
            cut_off(ipr, op.ifname, op.partition)
        case ops.Heal():
            reconnect(ipr, op.ifname)
        case ops.Rate():
            set_rate(ipr, op.ifname, op.bps)
        case ops.DegradeEgress():
            degrade_egress(ipr, op.ifname, op.up_bps, op.delays_ms, op.jitter_ms, op.loss, op.added_delay_ms,
                           op.added_loss, op.added_jitter_ms)
        case ops.DegradeIngress():
            degrade_ingress(ipr, op.ifname, op.bps, op.delay_ms, op.loss, op.jitter_ms)
        case ops.RedirectIngress():
            redirect_ingress(ipr, op.ifname, op.ifb)
        case ops.Sent():
            return link_sent(ipr, op.ifname)
        case ops.Counters():
            stats = ipr.get_links(link_index(ipr, op.ifname))[0].get_attr("IFLA_STATS64")
            return {name: stats[name] for name in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")}
        case ops.Describe():
            return {"lines": describe(ipr, op.ifname)}
        case ops.PeerIndex():
            return {"index": ipr.get_links(link_index(ipr, op.ifname))[0].get_attr("IFLA_LINK")}
        case ops.Probe():
            ok, why = try_qdisc(ipr, op.kind)
            return {"ok": ok, "why": why}
        case ops.Sysctls():
            return {"values": tcp_settings.write_in_netns(netns, dict(op.values))}
        case _:
            raise ValueError(f"no such shaping operation: {op!r}")
    return None
