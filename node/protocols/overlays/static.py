"""static-overlay: nodes keep exactly their planned neighbours (any overlay algorithm's output) and
disseminate with Topiary's TTL gossip (Topiary paper, section III).

A node relays a message it sees for the first time to all neighbours but the sender while its TTL is
above 0, and only to neighbours interested in the topic once it is 0. The TTL is decremented only by
nodes NOT subscribed to the topic, so subscribers pass it on unchanged; a non-subscriber that
receives it at 0 drops it. Initial TTL 1 (Topiary's default). Neighbours announce their topics on
connect, as in libp2p pubsub.
"""
from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from pydantic import Field

from node.protocols.base import parse_or_drop
from node.protocols.overlays.gossip_pb2 import GossipMessage, GossipRPC
from node.protocols.pubsub.topic_core import TopicCore, TopicParams


class StaticOverlayParams(TopicParams):
    ttl: int = Field(1, ge=0, le=255, description="initial TTL of a published message")


def _sizes(rpc: GossipRPC, encoded: bytes) -> dict[str, int]:
    return {"bytes": len(encoded), "data_bytes": sum(len(m.data) for m in rpc.messages),
            "msgs": len(rpc.messages), "subs": len(rpc.subscribe) + len(rpc.unsubscribe)}


class StaticOverlay(TopicCore):
    name = "static-overlay"
    Params = StaticOverlayParams

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.topic_seq: dict[str, int] = {}  # our messages per topic, carried so receivers see gaps

    @staticmethod
    def frame_topics(payload: bytes) -> set[str]:
        rpc = GossipRPC()
        try:
            rpc.ParseFromString(payload)
        except DecodeError:
            return set()
        return {m.topic for m in rpc.messages}

    def _announcement(self, topics: list[str], subscribe: bool) -> tuple[bytes, dict[str, int]]:
        rpc = GossipRPC(subscribe=topics) if subscribe else GossipRPC(unsubscribe=topics)
        payload = rpc.SerializeToString()
        return payload, _sizes(rpc, payload)

    def publish(self, topic: str, data: bytes) -> str:
        seqno = self.next_seqno()
        self.topic_seq[topic] = self.topic_seq.get(topic, 0) + 1
        msg = GossipMessage(origin=self.node_id, seqno=seqno, topic=topic, data=data, ttl=self.params.ttl,
                            topic_seq=self.topic_seq[topic])
        msg_id = f"{self.node_id}-{seqno}"
        self.seen.add(msg_id)
        self.io.trace("publish_message", topic=topic, msg_id=msg_id, size=len(data), seq=seqno)
        if topic in self.topics:
            self.io.deliver(topic, msg_id, data, self.node_id)
        self._relay(msg, msg.ttl, exclude=())
        return msg_id

    def on_frame(self, peer: str, payload: bytes) -> None:
        rpc = GossipRPC()
        if not parse_or_drop(self.io, rpc, payload, peer):
            return
        self.io.trace("recv_rpc", peer=peer, **_sizes(rpc, payload))
        topics = self.peer_topics.setdefault(peer, set())
        topics.update(rpc.subscribe)
        topics.difference_update(rpc.unsubscribe)
        for msg in rpc.messages:
            self._on_message(peer, msg)

    def _on_message(self, peer: str, msg: GossipMessage) -> None:
        msg_id = f"{msg.origin}-{msg.seqno}"
        if not self.first_sight(peer, msg.topic, msg_id, msg.origin, len(msg.data)):
            return
        if msg.topic in self.topics:
            self.io.trace("deliver_message", topic=msg.topic, msg_id=msg_id, origin=msg.origin, peer=peer,
                          size=len(msg.data))
            self.io.deliver(msg.topic, msg_id, msg.data, msg.origin)
            ttl = msg.ttl
        elif msg.ttl == 0:
            self.io.trace("reject_message", topic=msg.topic, msg_id=msg_id, peer=peer, reason="ttl expired")
            return
        else:
            ttl = msg.ttl - 1
        self._relay(msg, ttl, exclude=(peer, msg.origin))

    def _relay(self, msg: GossipMessage, ttl: int, exclude: tuple[str, ...]) -> None:
        out = GossipMessage()
        out.CopyFrom(msg)
        out.ttl = ttl
        rpc = GossipRPC(messages=[out])
        payload = rpc.SerializeToString()
        sizes = _sizes(rpc, payload)
        for peer, topics in self.peer_topics.items():
            if peer in exclude or (ttl == 0 and msg.topic not in topics):
                continue
            self.io.send(peer, payload)
            self.io.trace("send_rpc", peer=peer, **sizes)
