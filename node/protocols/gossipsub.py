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
- v1.2 IDONTWANT: on the first receipt of a message at or above the size threshold, before it is
  validated, sent to the mesh peers of its topic but the sender, on the priority path; received
  IDONTWANTs are kept per peer for idontwant_ttl heartbeats and honoured when relaying and when
  serving IWANT; never penalised;
- staggering (the seed's III-C, nim's `staggersend`): large messages are relayed to `stagger_parallel`
  peers at a time, moving on at each peer's IDONTWANT (it acts as an ACK) or after stagger_interval,
  and skipping peers whose IDONTWANT arrived first (logged as stagger_skip);
- fragmentation (III-A): a message at or above fragment_threshold is published as `fragments`
  independent gossipsub messages; receivers relay fragments as they arrive and deliver the whole
  message when every fragment is in and the digest checks.

- peer scoring P1..P7 (`gossipsub_score.py`), switchable (`scoring.enabled`; off, the default as in
  go, means every score is 0): negative peers leave the mesh and cannot graft, D_score best peers are
  kept when the mesh is oversubscribed, opportunistic grafting when the mesh median is low, no
  gossip to or from peers below the gossip threshold, no publish below the publish threshold, RPCs of
  graylisted peers dropped, PX only from peers at or above the accept-PX threshold;
- validators (`validators.py`): Accept delivers and relays, Reject drops and feeds P4, Ignore drops.
"""
from __future__ import annotations

import hashlib
import math
from collections import deque
from typing import Any, Literal

from google.protobuf.message import DecodeError
from pydantic import Field, model_validator

from node.proto.fragment_pb2 import Fragment
from node.proto.pubsub_pb2 import (
    RPC,
    ControlGraft,
    ControlIDontWant,
    ControlIHave,
    ControlIWant,
    ControlMessage,
    ControlPrune,
    Message,
)

from .gossipsub_score import PeerScore, ScoreParams
from .pubsub_wire import decode_rpc, default_msg_id, make_message, message_topics, subscriptions_rpc
from .topic_core import TopicCore, TopicParams
from .validators import ValidationParams, Verdict, make_validator

VARIANTS = {
    # name: (idontwant, stagger_parallel, fragments)
    "v1.1": (False, 0, 1),
    "v1.2": (True, 0, 1),
    "stagger-seq": (True, 1, 1),
    "stagger-2": (True, 2, 1),
    "stagger-3": (True, 3, 1),
    "stagger-4": (True, 4, 1),
    "fragment-4": (True, 0, 4),
    "all-3": (True, 3, 4),
}


class GossipSubParams(TopicParams):
    variant: Literal[tuple(VARIANTS)] = Field(  # type: ignore[valid-type]
        "v1.2", description="preset for idontwant, stagger_parallel and fragments (explicit values win)")
    D: int = Field(6, ge=1)
    D_lo: int = Field(4, ge=0)
    D_hi: int = Field(12, ge=1)
    D_lazy: int = Field(6, ge=0)
    D_out: int = Field(2, ge=0)
    D_score: int = Field(4, ge=0, description="peers kept by score when pruning an oversubscribed mesh")
    heartbeat_interval: float = Field(1.0, gt=0)
    heartbeat_initial_delay: float = Field(0.1, ge=0)
    fanout_ttl: float = Field(60.0, gt=0)
    history_length: int = Field(5, ge=1)
    history_gossip: int = Field(3, ge=0)
    gossip_factor: float = Field(0.25, ge=0, le=1)
    prune_backoff: float = Field(60.0, ge=0)
    unsubscribe_backoff: float = Field(10.0, ge=0)
    graft_flood_threshold: float = Field(10.0, ge=0)
    flood_publish: bool = True
    max_ihave_length: int = Field(5000, ge=1)
    max_ihave_messages: int = Field(10, ge=1)
    iwant_followup_time: float = Field(3.0, gt=0)
    gossip_retransmission: int = Field(3, ge=1)
    opportunistic_graft_ticks: int = Field(60, ge=1)
    opportunistic_graft_peers: int = Field(2, ge=0)
    max_rpc_size: int = Field(1024 * 1024, gt=0, description="bytes; larger RPCs are dropped (go/nim: 1 MiB)")
    msg_id: Literal["from-seqno", "hash"] = "from-seqno"
    # v1.2
    idontwant: bool = True
    idontwant_rule: Literal["go", "nim"] = Field("go", description="size threshold: go 1024 B; nim max(512, 10 x id length)")
    idontwant_threshold: int = Field(1024, ge=0, description="go rule: bytes")
    idontwant_ttl: int = Field(3, ge=1, description="heartbeats a received IDONTWANT is kept")
    max_idontwant_messages: int = Field(1000, ge=1, description="IDONTWANT RPCs accepted per peer per heartbeat")
    # staggering
    stagger_parallel: int = Field(0, ge=0, description="0: off; k: relay large messages to k peers at a time")
    stagger_threshold: int = Field(1024, ge=0, description="bytes; smaller messages are relayed at once")
    stagger_interval: float = Field(0.2, gt=0, description="seconds before moving on without an IDONTWANT")
    stagger_timeout: Literal["fixed", "drain"] = Field(
        "fixed", description="fixed: stagger_interval; drain: estimated time to push the bytes queued to "
                             "that peer out at stagger_rate shared by the parallel sends (nim `sims`)")
    stagger_rate: float = Field(50e6, gt=0, description="bit/s assumed by the drain estimate (the node's upload)")
    # fragmentation
    fragments: int = Field(1, ge=1, le=256)
    fragment_threshold: int = Field(1024, ge=0, description="bytes; smaller messages are not fragmented")
    scoring: ScoreParams = Field(default_factory=ScoreParams)
    validation: ValidationParams = Field(default_factory=ValidationParams)

    @model_validator(mode="after")
    def _variant_and_bounds(self) -> "GossipSubParams":
        idw, stagger, frags = VARIANTS[self.variant]
        explicit = self.model_fields_set
        if "idontwant" not in explicit:
            self.idontwant = idw
        if "stagger_parallel" not in explicit:
            self.stagger_parallel = stagger
        if "fragments" not in explicit:
            self.fragments = frags
        if not self.D_lo <= self.D <= self.D_hi:
            raise ValueError(f"need D_lo <= D <= D_hi (got {self.D_lo}, {self.D}, {self.D_hi})")
        if "D_score" not in explicit:
            self.D_score = min(self.D_score, self.D)
        if self.D_score > self.D:
            raise ValueError(f"D_score ({self.D_score}) cannot exceed D ({self.D})")
        if self.D_out >= self.D_lo and self.D_lo > 0:
            raise ValueError(f"D_out ({self.D_out}) must be below D_lo ({self.D_lo})")
        if self.history_gossip > self.history_length:
            raise ValueError("history_gossip cannot exceed history_length")
        return self


class _Stagger:
    """One large message being relayed a few peers at a time."""

    def __init__(self, msg_id: str, payload: bytes, sizes: dict[str, int], targets: list[str]):
        self.msg_id = msg_id
        self.payload = payload
        self.sizes = sizes
        self.pending = deque(targets)
        self.in_flight: set[str] = set()
        self.timers: dict[str, Any] = {}


class GossipSub(TopicCore):
    frame_topics = staticmethod(message_topics)
    wire = "pubsub"
    name = "gossipsub"
    Params = GossipSubParams

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        p = self.params
        self.mesh: dict[str, set[str]] = {}
        self.fanout: dict[str, set[str]] = {}
        self.fanout_last_pub: dict[str, float] = {}
        self.backoff: dict[tuple[str, str], float] = {}
        self.outbound: set[str] = set()
        self.mcache: dict[str, Message] = {}
        self.mcache_topic: dict[str, str] = {}
        self.history: deque[list[str]] = deque([[] for _ in range(p.history_length)], maxlen=p.history_length)
        self.dontwant: dict[str, dict[str, int]] = {}          # peer -> msg id -> expiry tick
        self.idontwant_rpcs: dict[str, int] = {}                # peer -> IDONTWANT RPCs this heartbeat
        self.ihave_count: dict[str, int] = {}                   # peer -> IHAVE RPCs this heartbeat
        self.iwant_asked: dict[str, int] = {}                   # peer -> ids asked for this heartbeat
        self.served: dict[tuple[str, str], int] = {}            # (peer, id) -> IWANT answers given
        self.promises: dict[str, tuple[str, float]] = {}        # id -> (peer, deadline)
        self.score = PeerScore(p.scoring, self.clock)
        self.validate = make_validator(p.validation)
        self.last_prune: dict[tuple[str, str], float] = {}
        self.pending: dict[str, ControlMessage] = {}            # control to piggyback / flush
        self.staggers: dict[str, _Stagger] = {}
        self.reassembly: dict[str, dict[str, Any]] = {}
        self.tick = 0

    # lifecycle -----------------------------------------------------------------------------------
    def on_start(self) -> None:
        self.io.set_timer(self.params.heartbeat_initial_delay, "heartbeat")

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
        candidates = [p for p in self._topic_peers(topic) if p not in peers and not self._backing_off(topic, p)]
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
            self._queue_prune(topic, peer, self.params.unsubscribe_backoff)
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
        msg = make_message(self.node_id, seqno, topic, data)
        msg_id = self._msg_id(msg)
        self.io.trace("publish_message", topic=topic, msg_id=msg_id, size=len(data), seq=seqno)
        self._publish_msg(msg, msg_id)
        return msg_id

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

    def _publish_raw(self, topic: str, data: bytes, whole_id: str) -> str:
        seqno = self.next_seqno()
        msg = make_message(self.node_id, seqno, topic, data)
        msg_id = self._msg_id(msg)
        self._publish_msg(msg, msg_id)
        return msg_id

    def _publish_msg(self, msg: Message, msg_id: str) -> None:
        topic = msg.topic
        self.seen.add(msg_id)
        self._cache(msg, msg_id)
        if self.params.flood_publish:
            targets = {x for x in self._topic_peers(topic) if self._above(x, "publish_threshold")}
        elif topic in self.mesh:
            targets = set(self.mesh[topic])
        else:
            self._fill_fanout(topic, self.fanout.setdefault(topic, set()))
            targets = set(self.fanout[topic])
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
        msg_id = self._msg_id(msg)
        origin = getattr(msg, "from").decode(errors="replace")
        topic = msg.topic
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
        targets = [p for p in self.mesh.get(topic, ()) if p not in (peer, origin)]
        self._send_message(msg, msg_id, sorted(targets))

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

    # control -------------------------------------------------------------------------------------
    def _on_control(self, peer: str, ctl: ControlMessage) -> None:
        for idw in ctl.idontwant:
            self._on_idontwant(peer, idw)
        gossip_ok = self._above(peer, "gossip_threshold")  # no gossip from peers below it
        iwant = [mid for ih in ctl.ihave for mid in self._on_ihave(peer, ih)] if gossip_ok else []
        if iwant:
            self._pending(peer).iwant.append(ControlIWant(messageIDs=[m.encode() for m in iwant]))
            deadline = self.clock() + self.params.iwant_followup_time
            for mid in iwant:
                self.promises.setdefault(mid, (peer, deadline))
        serve = [mid for iw in ctl.iwant for mid in self._on_iwant(peer, iw)] if gossip_ok else []
        for graft in ctl.graft:
            self._on_graft(peer, graft.topicID)
        for prune in ctl.prune:
            self._on_prune(peer, prune)
        if serve:
            rpc = RPC(publish=[self.mcache[mid] for mid in serve])
            self._send_rpc(peer, rpc)
        if iwant or (peer in self.pending and self.pending[peer].prune):
            self._flush(peer)

    def _on_idontwant(self, peer: str, idw: ControlIDontWant) -> None:
        count = self.idontwant_rpcs.get(peer, 0) + 1
        self.idontwant_rpcs[peer] = count
        if count > self.params.max_idontwant_messages:
            return
        expiry = self.tick + self.params.idontwant_ttl
        table = self.dontwant.setdefault(peer, {})
        for raw in idw.messageIDs[:10]:  # go: at most 10 ids per IDONTWANT
            mid = raw.decode(errors="replace")
            table[mid] = expiry
            job = self.staggers.get(mid)
            if job and peer in job.in_flight:
                self._stagger_next(job, peer)  # the IDONTWANT is the ACK: move on at once

    def _on_ihave(self, peer: str, ih: ControlIHave) -> list[str]:
        p = self.params
        count = self.ihave_count.get(peer, 0) + 1
        self.ihave_count[peer] = count
        if count > p.max_ihave_messages or ih.topicID not in self.topics:
            return []
        asked = self.iwant_asked.get(peer, 0)
        want = [m.decode(errors="replace") for m in ih.messageIDs]
        want = [m for m in want if m not in self.seen and m not in self.promises]
        self.rng.shuffle(want)
        want = want[:max(0, p.max_ihave_length - asked)]
        self.iwant_asked[peer] = asked + len(want)
        return want

    def _on_iwant(self, peer: str, iw: ControlIWant) -> list[str]:
        out = []
        for raw in iw.messageIDs:
            mid = raw.decode(errors="replace")
            if mid not in self.mcache:
                continue
            if mid in self.dontwant.get(peer, {}):
                self.io.trace("idontwant_skip", peer=peer, msg_id=mid, size=len(self.mcache[mid].data))
                continue
            key = (peer, mid)
            self.served[key] = self.served.get(key, 0) + 1
            if self.served[key] <= self.params.gossip_retransmission:
                out.append(mid)
        return out

    def _on_graft(self, peer: str, topic: str) -> None:
        if topic not in self.topics:
            return  # unknown topic: ignored (spec)
        mesh = self.mesh.setdefault(topic, set())
        if peer in mesh:
            return
        now = self.clock()
        expiry = self.backoff.get((topic, peer))
        if expiry is not None and now < expiry:
            # GRAFT during backoff: refuse and penalise, twice inside the graft-flood threshold
            pruned_at = self.last_prune.get((topic, peer), -math.inf)
            self._add_penalty(peer, 2 if now - pruned_at < self.params.graft_flood_threshold else 1, "graft in backoff")
            self._queue_prune(topic, peer, self.params.prune_backoff)
            return
        if self.score.score(peer) < 0 or (len(mesh) >= self.params.D_hi and peer not in self.outbound):
            self._queue_prune(topic, peer, self.params.prune_backoff)
            return
        mesh.add(peer)
        self.score.graft(peer, topic)
        self.io.trace("graft", peer=peer, topic=topic)

    def _on_prune(self, peer: str, prune: ControlPrune) -> None:
        topic = prune.topicID
        if peer in self.mesh.get(topic, set()):
            self.mesh[topic].discard(peer)
            self.score.prune(peer, topic)
            self.io.trace("prune", peer=peer, topic=topic)
        backoff = prune.backoff if prune.HasField("backoff") else self.params.prune_backoff
        self.backoff[(topic, peer)] = self.clock() + backoff
        if prune.peers and (not self.params.scoring.enabled or self._above(peer, "accept_px_threshold")):
            for info in prune.peers:  # PX: only peers whose address we were given can be dialled
                self.io.connect(info.peerID.decode(errors="replace"))

    # heartbeat -----------------------------------------------------------------------------------
    def on_timer(self, name: str, data: Any) -> None:
        if name == "heartbeat":
            self.heartbeat()
            self.io.set_timer(self.params.heartbeat_interval, "heartbeat")
        elif name == "validated":
            self._validated(*data)
        elif name == "stagger":
            msg_id, peer = data
            job = self.staggers.get(msg_id)
            if job and peer in job.in_flight:
                self._stagger_next(job, peer)

    def heartbeat(self) -> None:
        p = self.params
        self.tick += 1
        now = self.clock()
        self.idontwant_rpcs.clear()
        self.ihave_count.clear()
        self.iwant_asked.clear()
        self.backoff = {k: v for k, v in self.backoff.items() if v > now}
        for peer in list(self.dontwant):
            self.dontwant[peer] = {m: e for m, e in self.dontwant[peer].items() if e > self.tick}
        broken: dict[str, int] = {}
        for mid, (peer, deadline) in list(self.promises.items()):
            if deadline < now:  # broken IWANT promise
                del self.promises[mid]
                broken[peer] = broken.get(peer, 0) + 1
        for peer, count in sorted(broken.items()):
            self._add_penalty(peer, count, "broken promise")
        self.score.refresh(p.seen_ttl)
        score = {x: self.score.score(x) for x in self.peer_topics}

        for topic in sorted(self.mesh):
            mesh = self.mesh[topic]
            mesh &= set(self.peer_topics)
            for peer in sorted(x for x in mesh if score[x] < 0):
                self._prune_peer(topic, peer)
            if len(mesh) < p.D_lo:
                candidates = self._graft_candidates(topic, score)
                for peer in candidates[:p.D - len(mesh)]:
                    self._graft(topic, peer)
            elif len(mesh) > p.D_hi:
                keep = list(mesh)
                self.rng.shuffle(keep)
                keep.sort(key=lambda x: -score[x])  # stable: equal scores stay shuffled
                rest = keep[p.D_score:]
                self.rng.shuffle(rest)
                keep = keep[:p.D_score] + rest
                kept = set(keep[:p.D])
                outbound_kept = [x for x in kept if x in self.outbound]
                if len(outbound_kept) < p.D_out:  # keep D_out outbound peers
                    extra = [x for x in keep[p.D:] if x in self.outbound][:p.D_out - len(outbound_kept)]
                    drop = [x for x in keep[:p.D] if x not in self.outbound][:len(extra)]
                    kept = (kept - set(drop)) | set(extra)
                for peer in sorted(mesh - kept):
                    self._prune_peer(topic, peer)
            if len(mesh) >= p.D_lo and sum(1 for x in mesh if x in self.outbound) < p.D_out:
                candidates = [x for x in self._graft_candidates(topic, score) if x in self.outbound]
                for peer in candidates[:p.D_out - sum(1 for x in mesh if x in self.outbound)]:
                    self._graft(topic, peer)
            if self.tick % p.opportunistic_graft_ticks == 0 and len(mesh) > 1:
                ranked = sorted(score[x] for x in mesh)
                median = ranked[len(ranked) // 2]
                if median < p.scoring.opportunistic_graft_threshold and p.scoring.enabled:
                    better = [x for x in self._graft_candidates(topic, score) if score[x] > median]
                    for peer in better[:p.opportunistic_graft_peers]:
                        self._graft(topic, peer)

        for topic in list(self.fanout):
            if now - self.fanout_last_pub.get(topic, now) > p.fanout_ttl:
                del self.fanout[topic]
                self.fanout_last_pub.pop(topic, None)
                continue
            fan = self.fanout[topic]
            fan &= {x for x in self.peer_topics if topic in self.peer_topics[x] and self._above(x, "publish_threshold")}
            self._fill_fanout(topic, fan)

        self._emit_gossip()
        for peer in sorted(self.pending):
            self._flush(peer)
        expired = self.history.pop() if len(self.history) == self.history.maxlen else []
        self.history.appendleft([])
        for mid in expired:
            self.mcache.pop(mid, None)
            self.mcache_topic.pop(mid, None)
        for (peer, mid) in [k for k in self.served if k[1] not in self.mcache]:
            del self.served[(peer, mid)]

    def _emit_gossip(self) -> None:
        p = self.params
        recent: dict[str, list[str]] = {}
        for window in list(self.history)[:p.history_gossip]:
            for mid in window:
                recent.setdefault(self.mcache_topic[mid], []).append(mid)
        for topic, ids in sorted(recent.items()):
            exclude = self.mesh.get(topic, set()) | self.fanout.get(topic, set())
            candidates = [x for x in self._topic_peers(topic)
                          if x not in exclude and self._above(x, "gossip_threshold")]
            self.rng.shuffle(candidates)
            count = max(p.D_lazy, math.ceil(p.gossip_factor * len(candidates)))
            for peer in candidates[:count]:
                chosen = ids if len(ids) <= p.max_ihave_length else self.rng.sample(ids, p.max_ihave_length)
                self._pending(peer).ihave.append(ControlIHave(topicID=topic, messageIDs=[m.encode() for m in chosen]))

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
            job = self.staggers[msg_id] = _Stagger(msg_id, payload, sizes, wanted)
            for _ in range(min(p.stagger_parallel, len(wanted))):
                self._stagger_send(job)
            return
        for peer in wanted:
            self._send_payload(peer, payload, sizes)

    def _stagger_send(self, job: _Stagger) -> None:
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

    def _stagger_next(self, job: _Stagger, peer: str) -> None:
        job.in_flight.discard(peer)
        handle = job.timers.pop(peer, None)
        if handle is not None:
            self.io.cancel_timer(handle)
        self._stagger_send(job)

    def _send_payload(self, peer: str, payload: bytes, sizes: dict[str, int]) -> None:
        self.io.send(peer, payload)
        self.io.trace("send_rpc", peer=peer, **sizes)

    def _send_idontwant(self, topic: str, msg_id: str, exclude: set[str]) -> None:
        rpc = RPC(control=ControlMessage(idontwant=[ControlIDontWant(messageIDs=[msg_id.encode()])]))
        payload = rpc.SerializeToString()
        for peer in sorted(self.mesh.get(topic, set()) - exclude):
            self.io.send(peer, payload, priority=True)
            self.io.trace("send_rpc", peer=peer, **self._sizes(rpc, payload))

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

    def _graft(self, topic: str, peer: str) -> None:
        self.mesh.setdefault(topic, set()).add(peer)
        self.score.graft(peer, topic)
        self._pending(peer).graft.append(ControlGraft(topicID=topic))
        self.io.trace("graft", peer=peer, topic=topic)

    def _prune_peer(self, topic: str, peer: str) -> None:
        self.mesh[topic].discard(peer)
        self.score.prune(peer, topic)
        self._queue_prune(topic, peer, self.params.prune_backoff)
        self.io.trace("prune", peer=peer, topic=topic)

    def _queue_prune(self, topic: str, peer: str, backoff: float) -> None:
        self.backoff[(topic, peer)] = self.clock() + backoff
        self.last_prune[(topic, peer)] = self.clock()
        self._pending(peer).prune.append(ControlPrune(topicID=topic, backoff=int(backoff)))

    # helpers ------------------------------------------------------------------------------------
    def _topic_peers(self, topic: str) -> list[str]:
        return sorted(p for p, ts in self.peer_topics.items() if topic in ts)

    def _graft_candidates(self, topic: str, score: dict[str, float]) -> list[str]:
        """Topic peers outside the mesh, not backing off, with a non-negative score; shuffled."""
        mesh = self.mesh.get(topic, set())
        out = [x for x in self._topic_peers(topic)
               if x not in mesh and not self._backing_off(topic, x) and score.get(x, 0.0) >= 0]
        self.rng.shuffle(out)
        return out

    def _fill_fanout(self, topic: str, fan: set[str]) -> None:
        if len(fan) < self.params.D:
            extra = [x for x in self._topic_peers(topic) if x not in fan and self._above(x, "publish_threshold")]
            self.rng.shuffle(extra)
            fan |= set(extra[:self.params.D - len(fan)])

    def _above(self, peer: str, threshold: str) -> bool:
        """score(peer) >= the named threshold; always true with scoring off."""
        sp = self.params.scoring
        return not sp.enabled or self.score.score(peer) >= getattr(sp, threshold)

    def _backing_off(self, topic: str, peer: str) -> bool:
        return self.backoff.get((topic, peer), -math.inf) > self.clock()

    def _msg_id(self, msg: Message) -> str:
        if self.params.msg_id == "hash":
            return hashlib.sha256(msg.data).hexdigest()[:40]
        return default_msg_id(msg)

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
