"""What every topic-based core keeps: local subscriptions, each neighbour's announced topics, the
seen cache and the publish sequence number, plus join/leave announcements to neighbours.

A subclass says how to encode an announcement (`_announcement`) and does its own dissemination.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

from node.protocols.base import Params, ProtocolCore
from node.protocols.pubsub.wire import SeenCache


class TopicParams(Params):
    seen_ttl: float = Field(120.0, gt=0, description="seconds a message id stays in the seen cache")


class TopicCore(ProtocolCore):
    Params = TopicParams

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.topics: set[str] = set()
        self.peer_topics: dict[str, set[str]] = {}
        self.seen = SeenCache(self.params.seen_ttl, self.clock)
        # Message ids are origin + seqno; a restarted node must not reuse them (peers would take its
        # new messages for old ones). Like go-libp2p (which uses the wall clock), the counter starts
        # from the clock, in microseconds: 0 in a fresh simulation, later for every restart.
        self.seqno = int(self.clock() * 1e6)

    def _announcement(self, topics: list[str], subscribe: bool) -> tuple[bytes, dict[str, int]]:
        """Encoded frame announcing (un)subscriptions, and its send_rpc size fields."""
        raise TypeError(f"{type(self).__name__} must define _announcement")

    def _send_announcement(self, peer: str, topics: list[str], subscribe: bool) -> None:
        payload, sizes = self._announcement(topics, subscribe)
        self.io.send(peer, payload)
        self.io.trace("send_rpc", peer=peer, **sizes)

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        self.peer_topics[peer] = set()
        if self.topics:  # the "hello": our subscriptions, as libp2p pubsub sends on a new stream
            self._send_announcement(peer, sorted(self.topics), True)

    def on_peer_down(self, peer: str) -> None:
        self.peer_topics.pop(peer, None)

    def subscribe(self, topic: str) -> None:
        if topic not in self.topics:
            self.topics.add(topic)
            self.io.trace("join", topic=topic)
            for peer in self.peer_topics:
                self._send_announcement(peer, [topic], True)

    def unsubscribe(self, topic: str) -> None:
        if topic in self.topics:
            self.topics.discard(topic)
            self.io.trace("leave", topic=topic)
            for peer in self.peer_topics:
                self._send_announcement(peer, [topic], False)

    def first_sight(self, peer: str, topic: str, msg_id: str, origin: str, size: int) -> bool:
        """True for a message seen here for the first time (now marked seen); our own messages coming
        back and duplicates are logged and refused."""
        if origin == self.node_id:
            self.io.trace("reject_message", topic=topic, msg_id=msg_id, peer=peer, reason="self origin")
            return False
        if msg_id in self.seen:
            self.io.trace("duplicate_message", topic=topic, msg_id=msg_id, peer=peer, size=size)
            return False
        self.seen.add(msg_id)
        return True

    def next_seqno(self) -> int:
        self.seqno += 1
        return self.seqno

    def status(self) -> dict[str, Any]:
        return {"topics": sorted(self.topics), "peers": len(self.peer_topics), "seen": len(self.seen)}
