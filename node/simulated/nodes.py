"""A node of the discrete-event network (node/simulated/virtual_network.py): its record (core, events, deliveries, up or
down) and the ProtocolIO its core acts through."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node.identity import Identities
from node.protocols.base import ProtocolCore

if TYPE_CHECKING:
    from node.simulated.virtual_network import MemNetwork


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
    delivered_count: int = 0
    spec: tuple[Any, ...] = ()  # (core class, params, behaviour): what a restart rebuilds


class MemIO:
    def __init__(self, net: "MemNetwork", node_id: str):
        self.net = net
        self.node_id = node_id

    def send(self, peer: str, payload: bytes, priority: bool = False) -> None:
        self.net._send(self.node_id, peer, payload, priority)

    def connect(self, peer: str) -> None:
        self.net.connect(self.node_id, peer)

    def disconnect(self, peer: str) -> None:
        self.net.disconnect(self.node_id, peer)

    def set_timer(self, delay: float, name: str, data: Any = None) -> Any:
        node = self.net.nodes[self.node_id]
        core = node.core
        return self.net.schedule(delay, lambda: node.core is core and node.up and core.on_timer(name, data))

    def cancel_timer(self, handle: Any) -> None:
        self.net.cancel(handle)

    def deliver(self, topic: str, msg_id: str, data: bytes, origin: str) -> None:
        node = self.net.nodes[self.node_id]
        node.delivered_count += 1
        if self.net.keep_deliveries:
            node.delivered.append(Delivered(self.net.now, topic, msg_id, data, origin))

    def peer_ip(self, peer: str) -> str | None:
        return self.net.ips.get(peer)

    def backlog(self, peer: str) -> int:
        link = self.net.access.get(self.node_id)
        return link.backlog(peer) if link else 0

    def directory(self) -> dict[str, frozenset[str]]:
        """Every other node and its current subscriptions (the in-memory world is fully known)."""
        return {n: frozenset(getattr(node.core, "topics", ())) for n, node in self.net.nodes.items()
                if n != self.node_id}

    def identities(self) -> Identities:
        return self.net.identities

    def trace(self, type_: str, **fields: Any) -> None:
        self.net.emit(self.node_id, {"ts": int(self.net.now * 1e9), "node": self.node_id, "type": type_, **fields})
