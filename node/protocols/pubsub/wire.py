"""Pieces every libp2p-pubsub-family core shares: the RPC codec with byte accounting, message ids,
and the time-limited seen cache. GossipSub builds on the same functions."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterable

from google.protobuf.message import DecodeError

from node.protocols.pubsub.pubsub_pb2 import RPC, Message

__all__ = ["RPC", "Message", "DecodeError", "encode_rpc", "decode_rpc", "rpc_sizes", "default_msg_id",
           "make_message", "SeenCache"]


def rpc_sizes(rpc: RPC, encoded: bytes) -> dict[str, int]:
    """The send_rpc/recv_rpc fields: whole size, payload (data) part, message and subscription counts."""
    return {"bytes": len(encoded), "data_bytes": sum(len(m.data) for m in rpc.publish),
            "msgs": len(rpc.publish), "subs": len(rpc.subscriptions)}


def encode_rpc(rpc: RPC) -> bytes:
    return rpc.SerializeToString()


def decode_rpc(payload: bytes) -> RPC:
    """Parse one RPC; raises DecodeError on malformed bytes. proto2 does not check that strings are
    UTF-8 (protobuf then hands out bytes), so topic names are checked here: a core never sees one
    that is not text."""
    rpc = RPC()
    rpc.ParseFromString(payload)
    names = [s.topicid for s in rpc.subscriptions] + [m.topic for m in rpc.publish]
    if rpc.HasField("control"):
        c = rpc.control
        names += [x.topicID for x in c.ihave] + [x.topicID for x in c.graft] + [x.topicID for x in c.prune]
    if any(not isinstance(n, str) for n in names):
        raise DecodeError("topic name is not UTF-8")
    return rpc


def message_topics(payload: bytes) -> set[str]:
    """Topics of the messages an RPC carries (none if it does not parse)."""
    try:
        return {m.topic for m in decode_rpc(payload).publish}
    except DecodeError:
        return set()


def make_message(origin: str, seqno: int, topic: str, data: bytes) -> Message:
    return Message(**{"from": origin.encode(), "seqno": seqno.to_bytes(8, "big"), "topic": topic, "data": data})


def default_msg_id(msg: Message) -> str:
    """libp2p's default id, from || seqno, written readably as `<origin>-<seqno>`."""
    return f"{getattr(msg, 'from').decode(errors='replace')}-{int.from_bytes(msg.seqno, 'big')}"


def subscriptions_rpc(topics: Iterable[str], subscribe: bool = True) -> RPC:
    return RPC(subscriptions=[RPC.SubOpts(subscribe=subscribe, topicid=t) for t in sorted(topics)])


class SeenCache:
    """Message ids seen in the last `ttl` seconds (libp2p's seen cache); expired ids are purged on add."""

    def __init__(self, ttl: float, clock: Callable[[], float]):
        self.ttl = ttl
        self.clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, msg_id: str) -> bool:
        expiry = self._expiry.get(msg_id)
        return expiry is not None and expiry > self.clock()

    def add(self, msg_id: str) -> None:
        now = self.clock()
        while self._expiry:
            oldest, expiry = next(iter(self._expiry.items()))
            if expiry > now:
                break
            del self._expiry[oldest]
        self._expiry[msg_id] = now + self.ttl
        self._expiry.move_to_end(msg_id)

    def __len__(self) -> int:
        return len(self._expiry)
