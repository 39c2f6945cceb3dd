"""FloodSub (/floodsub/1.0.0): every message goes to every connected peer subscribed to its topic.

The baseline of the pubsub family: no mesh, no gossip; deduplication by the seen cache.
"""
from __future__ import annotations

from typing import Any

from node.protocols.pubsub.topic_core import TopicCore, TopicParams
from node.protocols.pubsub.wire import (
    RPC,
    DecodeError,
    decode_rpc,
    default_msg_id,
    encode_rpc,
    make_message,
    message_topics,
    rpc_sizes,
    subscriptions_rpc,
)


class FloodSubParams(TopicParams):
    pass


class FloodSub(TopicCore):
    frame_topics = staticmethod(message_topics)
    wire = "pubsub"
    name = "floodsub"
    Params = FloodSubParams

    def _announcement(self, topics: list[str], subscribe: bool) -> tuple[bytes, dict[str, int]]:
        rpc = subscriptions_rpc(topics, subscribe)
        payload = encode_rpc(rpc)
        return payload, rpc_sizes(rpc, payload)

    def publish(self, topic: str, data: bytes) -> str:
        seqno = self.next_seqno()
        msg = make_message(self.node_id, seqno, topic, data)
        msg_id = default_msg_id(msg)
        self.seen.add(msg_id)
        self.io.trace("publish_message", topic=topic, msg_id=msg_id, size=len(data), seq=seqno)
        if topic in self.topics:
            self.io.deliver(topic, msg_id, data, self.node_id)
        self._forward(msg, exclude=())
        return msg_id

    def on_frame(self, peer: str, payload: bytes) -> None:
        try:
            rpc = decode_rpc(payload)
        except DecodeError:
            self.io.trace("drop_rpc", peer=peer, bytes=len(payload), reason="malformed")
            return
        self.io.trace("recv_rpc", peer=peer, **rpc_sizes(rpc, payload))
        topics = self.peer_topics.setdefault(peer, set())
        for sub in rpc.subscriptions:
            (topics.add if sub.subscribe else topics.discard)(sub.topicid)
        for msg in rpc.publish:
            self._on_message(peer, msg)

    def _on_message(self, peer: str, msg: Any) -> None:
        msg_id = default_msg_id(msg)
        origin = getattr(msg, "from").decode(errors="replace")
        if msg.topic not in self.topics:
            self.io.trace("reject_message", topic=msg.topic, msg_id=msg_id, peer=peer, reason="not subscribed")
            return
        if not self.first_sight(peer, msg.topic, msg_id, origin, len(msg.data)):
            return
        self.io.trace("deliver_message", topic=msg.topic, msg_id=msg_id, origin=origin, peer=peer,
                      size=len(msg.data))
        self.io.deliver(msg.topic, msg_id, msg.data, origin)
        self._forward(msg, exclude=(peer, origin))

    def _forward(self, msg: Any, exclude: tuple[str, ...]) -> None:
        rpc = RPC(publish=[msg])
        payload = encode_rpc(rpc)
        sizes = rpc_sizes(rpc, payload)
        for peer, topics in self.peer_topics.items():
            if msg.topic in topics and peer not in exclude:
                self.io.send(peer, payload)
                self.io.trace("send_rpc", peer=peer, **sizes)
