"""Connections on demand, for cores that talk to whichever peer a lookup names (the DHT family).

A frame for a peer that is not connected waits while the peer is dialled; when the connection comes
up the queue is flushed in order. A dial that does not succeed within `dial_timeout` is given up
(the transport would otherwise redial forever): its frames are dropped, logged, and the owner is told
through `on_unreachable` so that it can drop the peer from its tables. A connection that goes down
is not redialled until something is sent to the peer again.
"""
from __future__ import annotations

from typing import Any, Callable

from node.protocols.base import ProtocolIO

TIMER = "links.dial"


class Links:
    def __init__(self, io: ProtocolIO, dial_timeout: float, on_unreachable: Callable[[str], None]):
        self.io = io
        self.dial_timeout = dial_timeout
        self.on_unreachable = on_unreachable
        self.up: set[str] = set()
        self._waiting: dict[str, list[tuple[bytes, dict[str, int]]]] = {}
        self._timers: dict[str, Any] = {}

    def send(self, peer: str, payload: bytes, sizes: dict[str, int]) -> None:
        """Send now if connected, else queue and dial. `sizes` are the send_rpc fields."""
        if peer in self.up:
            self.io.send(peer, payload)
            self.io.trace("send_rpc", peer=peer, **sizes)
            return
        queue = self._waiting.setdefault(peer, [])
        queue.append((payload, sizes))
        if len(queue) == 1:
            self.io.connect(peer)
            self._timers[peer] = self.io.set_timer(self.dial_timeout, TIMER, peer)

    def on_peer_up(self, peer: str) -> None:
        self.up.add(peer)
        timer = self._timers.pop(peer, None)
        if timer is not None:
            self.io.cancel_timer(timer)
        for payload, sizes in self._waiting.pop(peer, []):
            self.io.send(peer, payload)
            self.io.trace("send_rpc", peer=peer, **sizes)

    def on_peer_down(self, peer: str) -> None:
        self.up.discard(peer)
        self.io.disconnect(peer)  # on demand: no redialling until the next send

    def on_dial_timeout(self, peer: str) -> None:
        self._timers.pop(peer, None)
        frames = self._waiting.pop(peer, [])
        if peer in self.up or not frames:
            return
        self.io.disconnect(peer)
        for payload, _ in frames:
            self.io.trace("drop_rpc", peer=peer, bytes=len(payload), reason="peer unreachable")
        self.on_unreachable(peer)
