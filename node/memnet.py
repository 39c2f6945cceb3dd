"""A deterministic in-memory network driving sans-IO protocol cores in virtual time.

Every core's tests use it: frames arrive after the configured one-way latency (per ordered pair),
timers fire in virtual time, all randomness comes from one seed, and each node's trace events are
kept in a list in the shape of the event log. Same seed and inputs => the same events, bit for bit.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from node.behaviours import wrap
from node.eventlog import check_event
from node.protocols.base import ProtocolCore


@dataclass
class Delivered:
    time: float
    topic: str
    msg_id: str
    data: bytes
    origin: str


@dataclass
class MemNode:
    node_id: str
    core: ProtocolCore
    events: list[dict[str, Any]] = field(default_factory=list)
    delivered: list[Delivered] = field(default_factory=list)
    up: bool = True


class _MemIO:
    def __init__(self, net: "MemNetwork", node_id: str):
        self.net = net
        self.node_id = node_id

    def send(self, peer: str, payload: bytes, priority: bool = False) -> None:
        self.net._send(self.node_id, peer, payload)  # no queues in memory: everything is immediate

    def connect(self, peer: str) -> None:
        self.net.connect(self.node_id, peer)

    def disconnect(self, peer: str) -> None:
        self.net.disconnect(self.node_id, peer)

    def set_timer(self, delay: float, name: str, data: Any = None) -> Any:
        node = self.net.nodes[self.node_id]
        return self.net.schedule(delay, lambda: node.up and node.core.on_timer(name, data))

    def cancel_timer(self, handle: Any) -> None:
        self.net.cancel(handle)

    def deliver(self, topic: str, msg_id: str, data: bytes, origin: str) -> None:
        self.net.nodes[self.node_id].delivered.append(Delivered(self.net.now, topic, msg_id, data, origin))

    def peer_ip(self, peer: str) -> str | None:
        return self.net.ips.get(peer)

    def backlog(self, peer: str) -> int:
        return 0  # frames leave at once: memory has latency but no bandwidth

    def directory(self) -> dict[str, frozenset[str]]:
        """Every other node and its current subscriptions (the in-memory world is fully known)."""
        return {n: frozenset(getattr(node.core, "topics", ())) for n, node in self.net.nodes.items()
                if n != self.node_id}

    def trace(self, type_: str, **fields: Any) -> None:
        event = {"ts": int(self.net.now * 1e9), "node": self.node_id, "type": type_, **fields}
        check_event(event)
        self.net.nodes[self.node_id].events.append(event)


class MemNetwork:
    """Virtual-time network: `latency(a, b)` gives the one-way delay in seconds from a to b."""

    def __init__(self, seed: int = 0, latency: Callable[[str, str], float] | float = 0.01):
        self.now = 0.0
        self.rng = random.Random(seed)
        self._latency = latency if callable(latency) else (lambda a, b, d=latency: d)
        self._queue: list[tuple[float, int, Callable[[], Any]]] = []
        self._seq = itertools.count()
        self._cancelled: set[int] = set()
        self.nodes: dict[str, MemNode] = {}
        self.links: set[frozenset[str]] = set()
        self.ips: dict[str, str] = {}  # node -> IP, for cores that group peers by address

    def add_node(self, node_id: str, core_cls: type[ProtocolCore], params: Any = None,
                 ip: str | None = None, behaviour: dict[str, Any] | None = None) -> MemNode:
        """Add a node running `core_cls`; `behaviour` makes it an attacker (node/behaviours.py)."""
        self.ips[node_id] = ip or f"10.0.{len(self.nodes) // 256}.{len(self.nodes) % 256}"
        params = params if params is not None else core_cls.Params()
        rng = random.Random(self.rng.getrandbits(64))
        io = wrap(_MemIO(self, node_id), behaviour or {}, core_cls.frame_topics, self.schedule)
        core = core_cls(node_id, params, io, lambda: self.now, rng)
        node = self.nodes[node_id] = MemNode(node_id, core)
        core.on_start()
        return node

    # scheduling ----------------------------------------------------------------------------------
    def schedule(self, delay: float, action: Callable[[], Any]) -> int:
        seq = next(self._seq)
        heapq.heappush(self._queue, (self.now + max(0.0, delay), seq, action))
        return seq

    def cancel(self, handle: int) -> None:
        self._cancelled.add(handle)

    def run(self, until: float | None = None, max_events: int = 10_000_000) -> None:
        """Process events in time order until the queue is empty or virtual time reaches `until`."""
        for _ in range(max_events):
            if not self._queue or (until is not None and self._queue[0][0] > until):
                break
            when, seq, action = heapq.heappop(self._queue)
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                continue
            self.now = when
            action()
        else:
            raise RuntimeError("memnet: event budget exhausted (a protocol loop that never settles?)")
        if until is not None:
            self.now = max(self.now, until)

    # topology ------------------------------------------------------------------------------------
    def connect(self, a: str, b: str) -> None:
        """Open a link a->b; both cores see the peer come up one latency later (a is the dialer)."""
        link = frozenset((a, b))
        if link in self.links or a == b:
            return
        self.links.add(link)

        def up() -> None:
            if link not in self.links:
                return
            for me, other, outbound in ((a, b, True), (b, a, False)):
                self.nodes[me].events.append({"ts": int(self.now * 1e9), "node": me, "type": "connect",
                                              "peer": other, "outbound": outbound})
                self.nodes[me].core.on_peer_up(other, outbound)
        self.schedule(self._latency(a, b), up)

    def disconnect(self, a: str, b: str) -> None:
        link = frozenset((a, b))
        if link not in self.links:
            return
        self.links.discard(link)
        for me, other in ((a, b), (b, a)):
            if self.nodes[me].up:
                self.nodes[me].core.on_peer_down(other)

    def crash(self, node_id: str) -> None:
        """The node vanishes: its links drop and its pending timers are ignored."""
        node = self.nodes[node_id]
        for link in [l for l in self.links if node_id in l]:
            (other,) = link - {node_id}
            self.disconnect(node_id, other)
        node.up = False

    # frames --------------------------------------------------------------------------------------
    def _send(self, src: str, dst: str, payload: bytes) -> None:
        link = frozenset((src, dst))
        if link not in self.links:
            return

        def arrive() -> None:
            if link in self.links and self.nodes[dst].up:
                self.nodes[dst].core.on_frame(src, payload)
        self.schedule(self._latency(src, dst), arrive)

    # helpers for tests ---------------------------------------------------------------------------
    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        out = [e for n in self.nodes.values() for e in n.events if type_ is None or e["type"] == type_]
        return sorted(out, key=lambda e: (e["ts"], e["node"]))
