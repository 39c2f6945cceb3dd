"""GossipSub v1.1/v1.2 (/meshsub/1.1.0, /meshsub/1.2.0) as a sans-IO router, with the large-message
extensions of the seed (GossipSub staggering/fragmentation paper): IDONTWANT, staggered
relaying and fragmentation.

What it does, in the spec's terms:
- per topic a full-message mesh kept within [D_lo, D_hi] by the heartbeat (prune to D keeping D_out
  outbound peers, graft up to D), fanout for topics published but not joined (fanout_ttl), GRAFT and
  PRUNE with backoff (a GRAFT during backoff is refused with PRUNE and counts as a behaviour
  penalty, doubled inside the graft-flood threshold);
- seen cache and message cache (history_length windows, gossip from history_gossip), IHAVE to
  max(D_lazy, gossip_factor x candidates) non-mesh peers per heartbeat, IWANT for unseen ids with
  per-peer limits (max IHAVE length and messages per heartbeat), IWANT served at most
  gossip_retransmission times; broken IWANT promises count as behaviour penalties;
- control piggybacked and flushed once per heartbeat; flood publish switchable;
- message ids, `from` and StrictSign signatures as go-libp2p-pubsub makes them (node/protocols/pubsub/messages.py);
- direct peers (always sent every message, never in the mesh, redialled every direct_connect_ticks)
  and peer exchange sent with PRUNE (`do_px`, peer ids without signed peer records);
- go-libp2p-pubsub's counting rules: the mesh is pruned when it reaches D_hi, the gossip target is
  truncated, the IHAVE and IDONTWANT limits count RPCs, one promise per IWANT;
- v1.2 IDONTWANT: on the first receipt of a message at or above the size threshold, before it is
  validated, sent to the mesh peers of its topic but the sender, on the priority path; received
  IDONTWANTs are kept per peer for idontwant_ttl heartbeats and honoured when relaying and when
  serving IWANT; never penalised;
- staggering and fragmentation for large messages (large.py); the heartbeat's mesh,
  fanout and gossip work (heartbeat.py); received control (received_control.py); mesh
  membership, GRAFT/PRUNE with backoff and PX, direct peers (mesh.py);

- peer scoring P1..P7 (`score.py`), switchable (`scoring.enabled`; off, the default as in
  go, means every score is 0): negative peers leave the mesh and cannot graft, D_score best peers are
  kept when the mesh is oversubscribed, opportunistic grafting when the mesh median is low, no
  gossip to or from peers below the gossip threshold, no publish below the publish threshold, RPCs of
  graylisted peers dropped, PX only from peers at or above the accept-PX threshold;
- validators (`node/protocols/pubsub/validators.py`): Accept delivers and relays, Reject drops and feeds P4, Ignore drops.
"""
from __future__ import annotations

import hashlib
from typing import Any

from google.protobuf.message import DecodeError

from node.protocols.gossipsub.fragment_pb2 import Fragment
from node.protocols.gossipsub.heartbeat import Heartbeat
from node.protocols.gossipsub.large import LargeMessages
from node.protocols.gossipsub.mesh import MeshMembership
from node.protocols.gossipsub.params import GossipSubParams
from node.protocols.gossipsub.received_control import ControlHandling
from node.protocols.gossipsub.state import GossipSubState, Stagger
from node.protocols.pubsub.pubsub_pb2 import (
    RPC,
    ControlIDontWant,
    ControlMessage,
    Message,
)
from node.protocols.pubsub.validators import Verdict
from node.protocols.pubsub.wire import decode_rpc, message_topics, subscriptions_rpc

DIRECT_CONNECT_INITIAL_DELAY = 1.0  # seconds (go's GossipSubDirectConnectInitialDelay)


class GossipSub(Heartbeat, MeshMembership, LargeMessages, ControlHandling, GossipSubState):
    frame_topics = staticmethod(message_topics)
    wire = "pubsub"
    name = "gossipsub"
    Params = GossipSubParams

    # lifecycle -----------------------------------------------------------------------------------
    def on_start(self) -> None:
        self.io.set_timer(self.params.heartbeat_initial_delay, "heartbeat")
        if self.direct:
            self.io.set_timer(DIRECT_CONNECT_INITIAL_DELAY, "direct-connect")

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        if outbound:
            self.outbound.add(peer)
        self.score.add_peer(peer, self.io.peer_ip(peer))
        super().on_peer_up(peer, outbound)

    def on_peer_down(self, peer: str) -> None:
        super().on_peer_down(peer)
        self.score.remove_peer(peer)
        self.outbound.discard(peer)
        for peers in (*self.mesh.values(), *self.fanout.values()):
            peers.discard(peer)
        self.dontwant.pop(peer, None)
        self.pending.pop(peer, None)
        for job in self.staggers.values():
            if peer in job.in_flight:
                self._stagger_next(job, peer)

    def _announcement(self, topics: list[str], subscribe: bool) -> tuple[bytes, dict[str, int]]:
        rpc = subscriptions_rpc(topics, subscribe)
        payload = rpc.SerializeToString()
        return payload, self._sizes(rpc, payload)

    # app -----------------------------------------------------------------------------------------
    def subscribe(self, topic: str) -> None:
        if topic in self.topics:
            return
        super().subscribe(topic)
        # JOIN: fanout peers first, then any eligible peers, up to D
        peers = self.fanout.pop(topic, set())
        self.fanout_last_pub.pop(topic, None)
        candidates = [p for p in self._topic_peers(topic)
                      if p not in peers and p not in self.direct and not self._backing_off(topic, p)]
        self.rng.shuffle(candidates)
        peers |= set(candidates[:max(0, self.params.D - len(peers))])
        self.mesh[topic] = set()
        for peer in sorted(peers):
            self._graft(topic, peer)
            self._flush(peer)  # a join grafts at once, not at the next heartbeat

    def unsubscribe(self, topic: str) -> None:
        if topic not in self.topics:
            return
        for peer in sorted(self.mesh.pop(topic, set())):
            self.score.prune(peer, topic)
            self._queue_prune(topic, peer, self.params.unsubscribe_backoff, px=self.params.do_px)
            self._flush(peer)
        super().unsubscribe(topic)

    def publish(self, topic: str, data: bytes) -> str:
        p = self.params
        if p.fragments > 1 and len(data) >= p.fragment_threshold:
            return self._publish_fragmented(topic, data)
        if p.fragments > 1:  # small messages travel in a one-fragment envelope
            seqno = self.next_seqno()
            whole_id = f"{self.node_id}-w{seqno}"
            frag = Fragment(whole_id=whole_id, index=0, count=1, total_size=len(data),
                            digest=hashlib.sha256(data).digest(), chunk=data)
            self.io.trace("publish_message", topic=topic, msg_id=whole_id, size=len(data), seq=seqno)
            self._publish_raw(topic, frag.SerializeToString(), whole_id)
            return whole_id
        seqno = self.next_seqno()
        msg = self.ids.author(seqno, topic, data)
        msg_id = self.ids.label(msg)
        self.io.trace("publish_message", topic=topic, msg_id=msg_id, size=len(data), seq=seqno)
        self._publish_msg(msg, msg_id)
        return msg_id

    def _publish_raw(self, topic: str, data: bytes, whole_id: str) -> str:
        msg = self.ids.author(self.next_seqno(), topic, data)
        msg_id = self.ids.label(msg)
        self._publish_msg(msg, msg_id)
        return msg_id

    def _publish_msg(self, msg: Message, msg_id: str) -> None:
        topic = msg.topic
        self.seen.add(msg_id)
        self._cache(msg, msg_id)
        if self.params.flood_publish:
            targets = {x for x in self._topic_peers(topic) if x in self.direct or self._above(x, "publish_threshold")}
        elif topic in self.mesh:
            targets = self.mesh[topic] | self._direct_in(topic)
        else:
            fan = self.fanout.setdefault(topic, set())
            if not fan:  # go fills the fanout at publish only when it is empty; the heartbeat tops it up
                self._fill_fanout(topic, fan)
            targets = fan | self._direct_in(topic)
        self.fanout_last_pub[topic] = self.clock()
        if self.params.idontwant and self._idontwant_applies(msg, msg_id):
            # go sends IDONTWANT before its own publish too, so mesh peers that relay it skip us
            self._send_idontwant(topic, msg_id, exclude=set())
        self._send_message(msg, msg_id, sorted(targets))

    # receive -------------------------------------------------------------------------------------
    def on_frame(self, peer: str, payload: bytes) -> None:
        if len(payload) > self.params.max_rpc_size:
            self.io.trace("drop_rpc", peer=peer, bytes=len(payload), reason="oversized")
            return
        try:
            rpc = decode_rpc(payload)
        except DecodeError:
            self.io.trace("drop_rpc", peer=peer, bytes=len(payload), reason="malformed")
            return
        self.io.trace("recv_rpc", peer=peer, **self._sizes(rpc, payload))
        if not self._above(peer, "graylist_threshold"):
            self.io.trace("drop_rpc", peer=peer, bytes=len(payload), reason="graylisted")
            return
        topics = self.peer_topics.setdefault(peer, set())
        for sub in rpc.subscriptions:
            if sub.subscribe:
                topics.add(sub.topicid)
            else:
                topics.discard(sub.topicid)
                if peer in self.mesh.get(sub.topicid, ()):
                    self.mesh[sub.topicid].discard(peer)
                    self.score.prune(peer, sub.topicid)
                self.fanout.get(sub.topicid, set()).discard(peer)
        if rpc.HasField("control"):
            self._on_control(peer, rpc.control)  # IDONTWANT first: it may stop a relay below
        for msg in rpc.publish:
            self._on_message(peer, msg)

    def _on_message(self, peer: str, msg: Message) -> None:
        topic = msg.topic
        if self.ids.unsigned(msg):  # StrictSign: refused before the seen check, and scored (P4)
            self._reject_unauthentic(peer, msg, self.ids.label(msg), "missing signature")
            return
        msg_id = self.ids.label(msg)
        origin = self.ids.origin(msg)
        if msg_id not in self.seen and origin != self.node_id and not self.ids.signature_valid(msg):
            self._reject_unauthentic(peer, msg, msg_id, "invalid signature")  # keeps any promise open, as go
            return
        self.promises.pop(msg_id, None)
        if topic not in self.topics:
            self.io.trace("reject_message", topic=topic, msg_id=msg_id, peer=peer, reason="not subscribed")
            return
        if not self.first_sight(peer, topic, msg_id, origin, len(msg.data)):
            self.score.duplicate(msg_id, topic, peer)
            return
        self.score.first_seen(msg_id, peer)
        if self.params.idontwant and self._idontwant_applies(msg, msg_id):
            self._send_idontwant(topic, msg_id, exclude={peer})  # before validation, on the priority path
        if self.params.validation.delay > 0:
            self.io.set_timer(self.params.validation.delay, "validated", (peer, msg, msg_id, origin))
        else:
            self._validated(peer, msg, msg_id, origin)

    def _validated(self, peer: str, msg: Message, msg_id: str, origin: str) -> None:
        topic = msg.topic
        verdict = self.validate(topic, origin, msg.data)
        if verdict is not Verdict.ACCEPT:
            self.io.trace("reject_message", topic=topic, msg_id=msg_id, peer=peer, reason=f"validation: {verdict.value}")
            self.score.validated(msg_id, topic, None if verdict is Verdict.IGNORE else False)
            return
        if self.params.fragments > 1:
            if not self._on_fragment(peer, msg, msg_id, origin):
                self.score.validated(msg_id, topic, False)  # not a fragment envelope: invalid
                return
        else:
            self.io.trace("deliver_message", topic=topic, msg_id=msg_id, origin=origin, peer=peer,
                          size=len(msg.data))
            self.io.deliver(topic, msg_id, msg.data, origin)
        self.score.validated(msg_id, topic, True)
        self._cache(msg, msg_id)
        targets = (self.mesh.get(topic, set()) | self._direct_in(topic)) - {peer, origin}
        self._send_message(msg, msg_id, sorted(targets))

    def _reject_unauthentic(self, peer: str, msg: Message, msg_id: str, reason: str) -> None:
        self.io.trace("reject_message", topic=msg.topic, msg_id=msg_id, peer=peer, reason=reason)
        self.score.rejected(peer, msg.topic)

    # control -------------------------------------------------------------------------------------
    # heartbeat -----------------------------------------------------------------------------------
    def on_timer(self, name: str, data: Any) -> None:
        if name == "heartbeat":
            self.heartbeat()
            self.io.set_timer(self.params.heartbeat_interval, "heartbeat")
        elif name == "validated":
            self._validated(*data)
        elif name == "direct-connect":
            self._connect_direct()
        elif name == "stagger":
            msg_id, peer = data
            job = self.staggers.get(msg_id)
            if job and peer in job.in_flight:
                self._stagger_next(job, peer)

    # sending ------------------------------------------------------------------------------------
    def _send_message(self, msg: Message, msg_id: str, targets: list[str]) -> None:
        rpc = RPC(publish=[msg])
        payload = rpc.SerializeToString()
        sizes = self._sizes(rpc, payload)
        p = self.params
        staggered = bool(p.stagger_parallel) and len(msg.data) >= p.stagger_threshold
        wanted = []
        for peer in targets:
            if msg_id in self.dontwant.get(peer, {}):
                self.io.trace("stagger_skip" if staggered else "idontwant_skip", peer=peer, msg_id=msg_id,
                              size=len(msg.data))
            else:
                wanted.append(peer)
        if staggered and len(wanted) > 1:
            self.rng.shuffle(wanted)
            job = self.staggers[msg_id] = Stagger(msg_id, payload, sizes, wanted)
            for _ in range(min(p.stagger_parallel, len(wanted))):
                self._stagger_send(job)
            return
        for peer in wanted:
            self._send_payload(peer, payload, sizes)

    def _send_payload(self, peer: str, payload: bytes, sizes: dict[str, int]) -> None:
        self.io.send(peer, payload)
        self.io.trace("send_rpc", peer=peer, **sizes)

    def _send_idontwant(self, topic: str, msg_id: str, exclude: set[str]) -> None:
        rpc = RPC(control=ControlMessage(idontwant=[ControlIDontWant(messageIDs=[self.ids.to_wire(msg_id)])]))
        payload = rpc.SerializeToString()
        sizes = self._sizes(rpc, payload)
        for peer in sorted(self.mesh.get(topic, set()) - exclude):
            self.io.send(peer, payload, priority=True)
            self.io.trace("send_rpc", peer=peer, **sizes)

    def _pending(self, peer: str) -> ControlMessage:
        return self.pending.setdefault(peer, ControlMessage())

    def _flush(self, peer: str) -> None:
        ctl = self.pending.pop(peer, None)
        if ctl is not None and peer in self.peer_topics and ctl.ByteSize():
            self._send_rpc(peer, RPC(control=ctl))

    def _send_rpc(self, peer: str, rpc: RPC) -> None:
        payload = rpc.SerializeToString()
        self.io.send(peer, payload)
        self.io.trace("send_rpc", peer=peer, **self._sizes(rpc, payload))

    # helpers ------------------------------------------------------------------------------------
    def _idontwant_applies(self, msg: Message, msg_id: str) -> bool:
        if self.params.idontwant_rule == "nim":
            return len(msg.data) >= max(512, 10 * len(msg_id))
        return len(msg.data) >= self.params.idontwant_threshold

    def _cache(self, msg: Message, msg_id: str) -> None:
        if msg_id not in self.mcache:
            self.mcache[msg_id] = msg
            self.mcache_topic[msg_id] = msg.topic
            self.history[0].append(msg_id)

    def _add_penalty(self, peer: str, amount: float, why: str) -> None:
        """P7's input (it counts even with scoring off, for /status and the event log)."""
        self.score.add_penalty(peer, amount)
        self.io.trace("penalty", peer=peer, reason=why, **({"msgs": int(amount)} if amount != 1 else {}))

    @staticmethod
    def _sizes(rpc: RPC, payload: bytes) -> dict[str, int]:
        """send_rpc/recv_rpc fields: total and data bytes always; counts and bytes only of the parts
        present (ids for IHAVE/IWANT/IDONTWANT, entries for GRAFT/PRUNE), to keep the log small."""
        out = {"bytes": len(payload), "data_bytes": sum(len(m.data) for m in rpc.publish)}
        if rpc.publish:
            out["msgs"] = len(rpc.publish)
        if rpc.subscriptions:
            out["subs"] = len(rpc.subscriptions)
        if rpc.HasField("control"):
            ctl = rpc.control
            for kind, entries in (("ihave", ctl.ihave), ("iwant", ctl.iwant), ("idontwant", ctl.idontwant),
                                  ("graft", ctl.graft), ("prune", ctl.prune)):
                if entries:
                    out[kind] = len(entries) if kind in ("graft", "prune") else sum(len(e.messageIDs) for e in entries)
                    out[f"{kind}_bytes"] = sum(e.ByteSize() for e in entries)
        return out

    def status(self) -> dict[str, Any]:
        peers = sorted(self.peer_topics)
        return {**super().status(), "mesh": {t: sorted(m) for t, m in self.mesh.items()},
                "fanout": {t: len(m) for t, m in self.fanout.items()},
                "penalties": {x: self.score.penalty(x) for x in peers if self.score.penalty(x)},
                "scores": {x: round(self.score.score(x), 3) for x in peers} if self.params.scoring.enabled else {}}
