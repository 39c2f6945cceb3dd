"""The discrete-event network that drives sans-IO protocol cores in virtual time.

It is both the cores' test network and the engine of the `sim` backend (orchestrator/sim/engine.py):
- latency: one-way delay per ordered pair (`latency(a, b)`, seconds), plus uniform jitter that never
  reorders a connection (TCP keeps order), and frame loss (as the node transport emulates it);
- bandwidth (optional, per node): an uplink whose rate the connections with frames to send share
  equally (the kernel interleaves their segments on the link), each connection's frames in order
  with a priority lane that overtakes its queued normal frames (the transport's), and a downlink
  FIFO queue at the download rate that every sender's bytes join as they arrive (cut-through: an
  unloaded path costs one serialisation, as through the emulation's HTB and bridge), holding what
  the emulation's queue holds: bytes that come while it is full are dropped and TCP sends them again
  a round trip later, the connection's later frames waiting for them (downlinks.py). Frame sizes on
  the wire include the framing and per-segment TCP/IP/Ethernet headers (`wire_bytes`). With
  bandwidth, each direction of a connection also has TCP's congestion window (`TcpWindow`): a frame
  larger than the window waits extra round trips, as over a real round trip, and a queue or a loss
  on the way slows or cuts it;
- connections: a dial keeps the connection (redialled with the transport's backoff if it drops or
  the peer is not there, until the dialer disconnects), crashes, restarts with the same identity;
- network faults: a node cut off from peers (`cut_off`, a partition's sides as each node's peers
  across) has the frames sent between them held (TCP keeps them and retransmits: they arrive at the
  first retransmission after the cut is lifted, its timeout doubling from 200 ms + RTT) and dials
  between them time out; a degraded node's links get added latency, loss and new rates.
Frames arrive after the model's delay, timers fire in virtual time, all randomness comes from one
seed: same seed and inputs => the same events, bit for bit. Without bandwidth a frame leaves at once.
"""
from __future__ import annotations

import heapq
import itertools
import random
from typing import Any, Callable

from node import behaviours
from node.eventlog import check_event
from node.identity import Identities
from node.linkmodel import (
    DIAL_BACKOFF_FIRST,
    DIAL_TIMEOUT,
    REDIAL_AFTER_CLOSE,
    Degradations,
    next_backoff,
    release_time,
)
from node.protocols.base import ProtocolCore
from node.simulated.downlinks import Downlinks
from node.simulated.nodes import MemIO, MemNode
from node.simulated.tcp_window import RTO_MIN
from node.simulated.uplinks import Uplinks

EventSink = Callable[[str, dict[str, Any]], None]


class MemNetwork:
    """Virtual-time network: `latency(a, b)` gives the one-way delay in seconds from a to b.

    `sink(node_id, event)` receives every event (default: kept in `nodes[id].events`, schema-checked);
    `keep_deliveries=False` keeps only counts, not the delivered payloads (large runs)."""

    @classmethod
    def star(cls, core: type, params: Any, leaves: int, *, topic: str, seed: int = 0, until: float = 2.5,
             latency: float = 0.01) -> "MemNetwork":
        """n0 connected to n1..n<leaves>, every node running `core` with `params` and subscribed to
        `topic` at 0.5 s, run until `until` (a hub and its spokes: one router's work seen alone)."""
        net = cls(seed=seed, latency=latency)
        for i in range(leaves + 1):
            net.add_node(f"n{i}", core, params)
        for i in range(1, leaves + 1):
            net.connect("n0", f"n{i}")
        net.run(until=0.5)
        for node in net.nodes.values():
            node.core.subscribe(topic)
        net.run(until=until)
        return net

    def __init__(self, seed: int = 0, latency: Callable[[str, str], float] | float = 0.01, *,
                 jitter: float = 0.0, loss: float = 0.0, sink: EventSink | None = None,
                 keep_deliveries: bool = True, tcp_windows: bool = True,
                 addresses: dict[str, set[str]] | None = None,
                 core_rng: Callable[[str], random.Random] | None = None):
        """`tcp_windows`: with bandwidth, model each connection's congestion window (TcpWindow);
        `addresses`: the peers each node knows an address of, and so can dial (None: every node), as a
        node process has its config's peers; `core_rng(node)`: the random stream a node's core starts
        with, each time it boots (None: one drawn from the network's seed)."""
        self.addresses = addresses
        self.now = 0.0
        self.rng = random.Random(seed)
        self.identities = Identities(seed, lambda: self.nodes)
        self._latency = latency if callable(latency) else (lambda a, b, d=latency: d)
        self.jitter = jitter
        self.loss = loss
        self._sink = sink
        self.keep_deliveries = keep_deliveries
        self._queue: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._cancelled: set[int] = set()
        self.nodes: dict[str, MemNode] = {}
        self.links: dict[frozenset[str], int] = {}   # open connection -> its id (stale frames die)
        self._conn_ids = itertools.count(1)
        self.dials: dict[str, set[str]] = {}          # node -> peers it keeps a connection to
        self.uplinks = Uplinks(self, tcp_windows)
        self.access = self.uplinks.access   # node -> its access link, when bandwidth is modelled
        self.downlinks = Downlinks(self)
        self._last_arrival: dict[tuple[str, str], float] = {}  # per direction: jitter never reorders
        self.ips: dict[str, str] = {}  # node -> IP, for cores that group peers by address
        self.before_boot: Callable[[str], None] | None = None  # called as a node's process starts
        self._core_rng = core_rng
        self.cut: dict[str, frozenset[str]] = {}      # node -> the peers it is cut off from (none: absent)
        self._held: dict[tuple[str, str], tuple[float, list[tuple[bytes, bool]]]] = {}  # frames across the cut
        self.degraded = Degradations()  # the fault timeline's degraded access links
        self.processed = 0             # events executed, for speed figures
        self.in_flight = 0             # frames sent and not yet arrived or dropped
        self.peak_in_flight = 0

    def add_node(self, node_id: str, core_cls: type[ProtocolCore], params: Any = None,
                 ip: str | None = None, behaviour: dict[str, Any] | None = None,
                 bandwidth: tuple[float, float] | None = None) -> MemNode:
        """Add a node running `core_cls`; `behaviour` makes it an attacker (node/behaviours.py);
        `bandwidth` = (up, down) in bit/s serialises its frames (None: no bandwidth limit)."""
        self.ips[node_id] = ip or f"10.0.{len(self.nodes) // 256}.{len(self.nodes) % 256}"
        params = params if params is not None else core_cls.Params()
        if bandwidth:
            self.uplinks.add(node_id, *bandwidth)
        node = self.nodes[node_id] = MemNode(node_id, None, spec=(core_cls, params, behaviour or {}))  # type: ignore[arg-type]
        self._boot(node)
        return node

    def _boot(self, node: MemNode) -> None:
        core_cls, params, behaviour = node.spec
        if self.before_boot:
            self.before_boot(node.node_id)
        rng = self._core_rng(node.node_id) if self._core_rng else random.Random(self.rng.getrandbits(64))
        node.core = behaviours.build(core_cls, node.node_id, params, MemIO(self, node.node_id), lambda: self.now,
                                     rng, behaviour, self.schedule)
        node.up = True
        node.core.on_start()

    def emit(self, node_id: str, event: dict[str, Any]) -> None:
        if self._sink is not None:
            self._sink(node_id, event)
        else:
            check_event(event)
            self.nodes[node_id].events.append(event)

    # scheduling ----------------------------------------------------------------------------------
    def schedule(self, delay: float, action: Callable[..., Any], *args: Any) -> int:
        """Call `action(*args)` after `delay` virtual seconds; returns a handle for `cancel`."""
        seq = next(self._seq)
        heapq.heappush(self._queue, (self.now + max(0.0, delay), seq, action, args))
        return seq

    def schedule_at(self, when: float, action: Callable[..., Any], *args: Any) -> int:
        """Call `action(*args)` at virtual time `when` (now, if that has passed)."""
        seq = next(self._seq)
        heapq.heappush(self._queue, (max(self.now, when), seq, action, args))
        return seq

    def cancel(self, handle: int) -> None:
        self._cancelled.add(handle)

    def run(self, until: float | None = None, max_events: int = 10_000_000) -> None:
        """Process events in time order until the queue is empty or virtual time reaches `until`."""
        queue, cancelled, pop = self._queue, self._cancelled, heapq.heappop
        done = 0
        for done in range(1, max_events + 1):
            if not queue or (until is not None and queue[0][0] > until):
                break
            when, seq, action, args = pop(queue)
            if seq in cancelled:
                cancelled.discard(seq)
                continue
            self.now = when
            action(*args)
        else:
            raise RuntimeError("the in-memory network: event budget exhausted (a protocol loop that never settles?)")
        self.processed += done - 1
        if until is not None:
            self.now = max(self.now, until)

    # connections ---------------------------------------------------------------------------------
    def connect(self, a: str, b: str) -> None:
        """a dials b and keeps the connection: both cores see the peer come up one latency later; a
        peer that is down (or not there yet) is redialled with backoff; one a has no address of is not
        dialled."""
        if a == b or (self.addresses is not None and b not in self.addresses.get(a, ())):
            return  # (a node process dials only the peers its config gives an address of)
        self.dials.setdefault(a, set()).add(b)
        self._redial(a, b, DIAL_BACKOFF_FIRST)

    def _reachable(self, a: str, b: str) -> bool:
        return not self.cut or not self._across(a, b)

    def _across(self, a: str, b: str) -> bool:
        return b in self.cut.get(a, ()) or a in self.cut.get(b, ())

    def _open(self, a: str, b: str) -> None:
        link = frozenset((a, b))
        if link in self.links or not (self.nodes[a].up and self.nodes[b].up):
            return
        conn = self.links[link] = next(self._conn_ids)

        def up() -> None:
            if self.links.get(link) != conn:
                return
            for me, other, outbound in ((a, b, True), (b, a, False)):
                self.emit(me, {"ts": int(self.now * 1e9), "node": me, "type": "connect", "peer": other,
                               "outbound": outbound})
                self.nodes[me].core.on_peer_up(other, outbound)
        self.schedule(self.one_way(a, b), up)

    def disconnect(self, a: str, b: str, reason: str = "closed") -> None:
        """a closes its connection to b and stops redialling it (b redials if b had dialled a)."""
        self.dials.get(a, set()).discard(b)
        self._close(a, b, reason)

    def _close(self, a: str, b: str, reason: str) -> None:
        link = frozenset((a, b))
        if self.links.pop(link, None) is None:
            return
        for me, other in ((a, b), (b, a)):
            node = self.nodes[me]
            if node.up:
                self.emit(me, {"ts": int(self.now * 1e9), "node": me, "type": "disconnect", "peer": other,
                               "reason": reason})
                node.core.on_peer_down(other)
                if other in self.dials.get(me, ()):
                    self.schedule(REDIAL_AFTER_CLOSE, self._redial, me, other, DIAL_BACKOFF_FIRST)

    def _redial(self, a: str, b: str, backoff: float) -> None:
        if not self.nodes[a].up or b not in self.dials.get(a, ()) or frozenset((a, b)) in self.links:
            return
        target = self.nodes.get(b)
        if target is not None and target.up and self._reachable(a, b):
            self._open(a, b)
            return
        wait = backoff if target is None or not target.up or self._reachable(a, b) else DIAL_TIMEOUT + backoff
        self.schedule(wait, self._redial, a, b, next_backoff(backoff))

    def crash(self, node_id: str, reason: str = "peer crashed") -> None:
        """The node vanishes: its links drop, its queued frames and pending timers are forgotten."""
        node = self.nodes[node_id]
        node.up = False   # first: a dead process notices nothing and logs nothing
        for link in [l for l in self.links if node_id in l]:
            (other,) = link - {node_id}
            self._close(node_id, other, reason)
        self.dials.pop(node_id, None)
        self.in_flight -= self.uplinks.drop_queued(node_id)
        for key in [k for k in self._held if node_id in k]:
            self.in_flight -= len(self._held.pop(key)[1])

    def restart(self, node_id: str) -> MemNode:
        """Bring a crashed node back with the same identity and a fresh core (on_start runs)."""
        node = self.nodes[node_id]
        if node.up:
            raise RuntimeError(f"the in-memory network: {node_id} is running; crash it before restarting it")
        self._boot(node)
        return node

    # network faults ------------------------------------------------------------------------------
    def cut_off(self, cuts: dict[str, frozenset[str]]) -> None:
        """Each named node cut off from these peers from now on, in place of its cut before (an empty set
        lifts it); frames between a node and a peer it is cut off from, either way, are held (see above).
        The directions no longer cut resume at their next retransmission, in order."""
        for node, peers in cuts.items():
            if peers:
                self.cut[node] = frozenset(peers)
            else:
                self.cut.pop(node, None)
        lifted = sorted(key for key in self._held if not self._across(*key))
        for src, dst in lifted:
            first, frames = self._held.pop((src, dst))
            rto = RTO_MIN + self._latency(src, dst) + self._latency(dst, src)
            wait = rto
            while first + wait < self.now:  # the timeout doubles after each lost retransmission
                rto *= 2
                wait += rto
            for payload, priority in frames:
                self.schedule(first + wait - self.now, self._resend, src, dst, payload, priority)

    def _resend(self, src: str, dst: str, payload: bytes, priority: bool) -> None:
        self.in_flight -= 1  # counted again by _send
        if self.nodes[src].up:
            self._send(src, dst, payload, priority)

    def degrade(self, node_id: str, delay: float = 0.0, loss: float = 0.0,
                bandwidth: tuple[float, float] | None = None, jitter: float = 0.0) -> None:
        """Add `delay` and `jitter` seconds and `loss` to every link of the node, both ways (zeros
        restore); `bandwidth` = (up, down) bit/s sets its link rates from now on."""
        self.degraded.set(node_id, delay, loss, jitter)
        if bandwidth:
            self.uplinks.set_rates(node_id, *bandwidth)

    def one_way(self, a: str, b: str) -> float:
        base = self._latency(a, b)
        return base + self.degraded.added_delay(a, b) if self.degraded else base

    def _lost(self, a: str, b: str) -> bool:
        loss = self.degraded.loss(a, b, self.loss) if self.degraded else self.loss
        return bool(loss) and self.rng.random() < loss

    # frames --------------------------------------------------------------------------------------
    def _send(self, src: str, dst: str, payload: bytes, priority: bool = False) -> None:
        link = frozenset((src, dst))
        conn = self.links.get(link)
        if conn is None:
            return
        if self.cut and self._across(src, dst):
            first, frames = self._held.setdefault((src, dst), (self.now, []))
            frames.append((payload, priority))
            self.in_flight += 1
            return
        if (self.loss or self.degraded) and self._lost(src, dst):
            self.emit(src, {"ts": int(self.now * 1e9), "node": src, "type": "drop_rpc", "peer": dst,
                            "bytes": len(payload), "reason": "emulated loss"})
            return
        self.in_flight += 1
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        if not self.uplinks.send(src, dst, payload, priority, conn):  # no bandwidth modelled: it leaves at once
            self.propagate(src, dst, conn, payload, 0, 0.0)

    def rtt(self, a: str, b: str) -> float:
        return self.one_way(a, b) + self.one_way(b, a)

    def propagate(self, src: str, dst: str, conn: int, payload: bytes | None, size: float, spread: float,
                  ordered: bool = False) -> None:
        """A flight's last `size` wire bytes have left `src` over the last `spread` seconds; they reach
        dst's downlink after the latency. `payload`: the frame the flight ends, handed over once the
        downlink has let them through (None: a flight of a frame still being sent). `ordered`: it may
        have waited for its window, so keep the connection's order."""
        delay = self.one_way(src, dst)
        jitter = self.jitter + self.degraded.added_jitter(src, dst) if self.degraded else self.jitter
        key = (src, dst)
        if jitter or ordered:
            arrival = self._last_arrival[key] = release_time(self.now, delay, jitter, self.rng,
                                                             self._last_arrival.get(key, 0.0))
        else:
            arrival = self.now + delay
            # nothing overtakes on a link that never changed: no per-direction state on the hot path; a
            # link degraded or jittered once keeps its order across the change and the restore
            if self.degraded or key in self._last_arrival:
                arrival = self._last_arrival[key] = max(arrival, self._last_arrival.get(key, 0.0))
        # a frame in flight is one heap entry and its argument tuple, no closures (thousands at once)
        self.schedule(arrival - self.now, self.downlinks.reach, src, dst, conn, payload, size, spread)

    def hand_over(self, src: str, dst: str, conn: int, payload: bytes) -> None:
        self.in_flight -= 1
        if self.links.get(frozenset((src, dst))) == conn and self.nodes[dst].up:
            self.nodes[dst].core.on_frame(src, payload)

    # helpers for tests ---------------------------------------------------------------------------
    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        out = [e for n in self.nodes.values() for e in n.events if type_ is None or e["type"] == type_]
        return sorted(out, key=lambda e: (e["ts"], e["node"]))
