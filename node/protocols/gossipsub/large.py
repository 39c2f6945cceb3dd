"""GossipSub's large-message extensions (the staggering/fragmentation paper, sections III-A and III-C):
staggered relaying, a few peers at a time, moving on at each peer's IDONTWANT or a timeout, and
fragmentation into independent messages reassembled and digest-checked by receivers. A part of the
GossipSub core (node/protocols/gossipsub/core.py), kept apart so each piece reads on its own."""
from __future__ import annotations

import hashlib
import math

from google.protobuf.message import DecodeError

from node.protocols.gossipsub.fragment_pb2 import Fragment
from node.protocols.gossipsub.state import GossipSubState, Stagger
from node.protocols.pubsub.pubsub_pb2 import (
    Message,
)


class LargeMessages(GossipSubState):
    """Staggering and fragmentation; mixed into GossipSub, whose state and helpers it uses."""

    def _publish_fragmented(self, topic: str, data: bytes) -> str:
        seqno = self.next_seqno()
        whole_id = f"{self.node_id}-w{seqno}"
        count = self.params.fragments
        size = math.ceil(len(data) / count)
        digest = hashlib.sha256(data).digest()
        self.io.trace("publish_message", topic=topic, msg_id=whole_id, size=len(data), seq=seqno)
        for i in range(count):
            chunk = data[i * size:(i + 1) * size]
            frag = Fragment(whole_id=whole_id, index=i, count=count, total_size=len(data), digest=digest, chunk=chunk)
            frag_id = self._publish_raw(topic, frag.SerializeToString(), whole_id)
            self.io.trace("publish_fragment", topic=topic, msg_id=frag_id, whole_id=whole_id, fragment=i,
                          fragments=count, size=len(chunk))
        return whole_id

    def _on_fragment(self, peer: str, msg: Message, msg_id: str, origin: str) -> bool:
        frag = Fragment()
        try:
            frag.ParseFromString(msg.data)
        except DecodeError:
            self.io.trace("reject_message", topic=msg.topic, msg_id=msg_id, peer=peer, reason="bad fragment")
            return False
        if frag.count > 1:
            self.io.trace("deliver_fragment", topic=msg.topic, msg_id=msg_id, whole_id=frag.whole_id,
                          fragment=frag.index, fragments=frag.count, origin=origin, peer=peer, size=len(frag.chunk))
        st = self.reassembly.setdefault(frag.whole_id, {"chunks": {}, "count": frag.count, "done": False})
        if st["done"]:
            return True
        st["chunks"][frag.index] = frag.chunk
        if len(st["chunks"]) == frag.count:
            data = b"".join(st["chunks"][i] for i in range(frag.count))
            st["done"], st["chunks"] = True, {}
            if len(data) != frag.total_size or hashlib.sha256(data).digest() != frag.digest:
                self.io.trace("reject_message", topic=msg.topic, msg_id=frag.whole_id, peer=peer,
                              reason="reassembled payload does not match its digest")
                return True
            self.io.trace("deliver_message", topic=msg.topic, msg_id=frag.whole_id, origin=origin, peer=peer,
                          size=len(data))
            self.io.deliver(msg.topic, frag.whole_id, data, origin)
        return True  # fragments are relayed as they arrive

    def _stagger_send(self, job: Stagger) -> None:
        while job.pending:
            peer = job.pending.popleft()
            if job.msg_id in self.dontwant.get(peer, {}):
                self.io.trace("stagger_skip", peer=peer, msg_id=job.msg_id, size=job.sizes["data_bytes"])
                continue
            if peer not in self.peer_topics:
                continue
            job.in_flight.add(peer)
            self._send_payload(peer, job.payload, job.sizes)
            job.timers[peer] = self.io.set_timer(self._stagger_timeout(peer, len(job.payload)), "stagger",
                                                 (job.msg_id, peer))
            return
        if not job.in_flight:
            self.staggers.pop(job.msg_id, None)

    def _stagger_timeout(self, peer: str, size: int) -> float:
        p = self.params
        if p.stagger_timeout == "fixed":
            return p.stagger_interval
        # drain: the bytes ahead of and including this copy, at our upload rate shared by the k sends
        queued = max(self.io.backlog(peer), size)
        return queued * 8 * p.stagger_parallel / p.stagger_rate

    def _stagger_next(self, job: Stagger, peer: str) -> None:
        job.in_flight.discard(peer)
        handle = job.timers.pop(peer, None)
        if handle is not None:
            self.io.cancel_timer(handle)
        self._stagger_send(job)
