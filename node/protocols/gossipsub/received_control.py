"""GossipSub's control messages as received: GRAFT and PRUNE (with backoff, PX and penalties), IHAVE
and IWANT (with per-heartbeat limits and promises), IDONTWANT. A part of the GossipSub core
(node/protocols/gossipsub/core.py), kept apart so each piece reads on its own."""
from __future__ import annotations

import math
from typing import Sequence

from node.protocols.gossipsub.state import GossipSubState
from node.protocols.pubsub.pubsub_pb2 import (
    RPC,
    ControlIDontWant,
    ControlIHave,
    ControlIWant,
    ControlMessage,
    ControlPrune,
)


class ControlHandling(GossipSubState):
    """Handlers of received control; mixed into GossipSub, whose state and helpers it uses."""

    def _on_control(self, peer: str, ctl: ControlMessage) -> None:
        gossip_ok = self._above(peer, "gossip_threshold")  # no gossip to or from peers below it
        iwant = self._on_ihave(peer, ctl.ihave) if gossip_ok else []
        serve = self._on_iwant(peer, ctl.iwant) if gossip_ok else []
        for graft in ctl.graft:
            self._on_graft(peer, graft.topicID)
        for prune in ctl.prune:
            self._on_prune(peer, prune)
        self._on_idontwant(peer, ctl.idontwant)
        if iwant:
            self._pending(peer).iwant.append(ControlIWant(messageIDs=[self.ids.to_wire(m) for m in iwant]))
            # go's gossip tracer: one id of the IWANT, at random, stands for the whole request
            promised = self.rng.choice(iwant)
            self.promises.setdefault(promised, {}).setdefault(peer, self.clock() + self.params.iwant_followup_time)
        pending = self.pending.get(peer)
        if serve or iwant or (pending is not None and pending.prune):
            # one reply, as go's HandleRPC: the messages asked for, our IWANT, the PRUNEs, and whatever
            # control waited for this peer
            ctl_out = self.pending.pop(peer, None)
            rpc = RPC(publish=[self.mcache[mid] for mid in serve])
            if ctl_out is not None and ctl_out.ByteSize():
                rpc.control.CopyFrom(ctl_out)
            self._send_rpc(peer, rpc)

    def _on_idontwant(self, peer: str, entries: Sequence[ControlIDontWant]) -> None:
        """go's handleIDontWant: at most max_idontwant_messages RPCs per heartbeat and
        max_idontwant_length ids per RPC, across its entries."""
        if not entries:
            return
        count = self.idontwant_rpcs.get(peer, 0)
        if count >= self.params.max_idontwant_messages:
            return
        self.idontwant_rpcs[peer] = count + 1
        expiry = self.tick + self.params.idontwant_ttl
        table = self.dontwant.setdefault(peer, {})
        raw_ids = [raw for idw in entries for raw in idw.messageIDs][:self.params.max_idontwant_length]
        for raw in raw_ids:
            mid = self.ids.from_wire(raw)
            table[mid] = expiry
            job = self.staggers.get(mid)
            if job and peer in job.in_flight:
                self._stagger_next(job, peer)  # the IDONTWANT is the ACK: move on at once

    def _on_ihave(self, peer: str, entries: Sequence[ControlIHave]) -> list[str]:
        """go's handleIHave: every RPC with control counts towards max_ihave_messages (go calls it for
        each); ids already seen are skipped (asking several peers for one id is allowed), at most
        max_ihave_length ids per entry and per heartbeat are asked for, in random order."""
        p = self.params
        count = self.ihave_count.get(peer, 0) + 1
        self.ihave_count[peer] = count
        asked = self.iwant_asked.get(peer, 0)
        if count > p.max_ihave_messages or asked >= p.max_ihave_length:
            return []
        want: dict[str, None] = {}
        for ih in entries:
            if ih.topicID not in self.mesh:
                continue
            for raw in ih.messageIDs[:p.max_ihave_length]:
                mid = self.ids.from_wire(raw)
                if mid not in self.seen:
                    want[mid] = None
        out = list(want)
        self.rng.shuffle(out)
        out = out[:p.max_ihave_length - asked]
        self.iwant_asked[peer] = asked + len(out)
        return out

    def _on_iwant(self, peer: str, entries: Sequence[ControlIWant]) -> list[str]:
        out: dict[str, None] = {}
        for iw in entries:
            for raw in iw.messageIDs:
                mid = self.ids.from_wire(raw)
                if mid in out or mid not in self.mcache:
                    continue
                if mid in self.dontwant.get(peer, {}):
                    self.io.trace("idontwant_skip", peer=peer, msg_id=mid, size=len(self.mcache[mid].data))
                    continue
                key = (peer, mid)
                self.served[key] = self.served.get(key, 0) + 1
                if self.served[key] <= self.params.gossip_retransmission:
                    out[mid] = None
        return list(out)

    def _on_graft(self, peer: str, topic: str) -> None:
        if topic not in self.topics:
            return  # unknown topic: ignored (spec)
        mesh = self.mesh.setdefault(topic, set())
        if peer in mesh:
            return
        if peer in self.direct:  # go: we do not graft direct peers; a PRUNE tells them (no PX)
            self._queue_prune(topic, peer, self.params.prune_backoff)
            return
        now = self.clock()
        expiry = self.backoff.get((topic, peer))
        if expiry is not None and now < expiry:
            # GRAFT during backoff: refuse and penalise, twice inside the graft-flood threshold
            pruned_at = self.last_prune.get((topic, peer), -math.inf)
            self._add_penalty(peer, 2 if now - pruned_at < self.params.graft_flood_threshold else 1, "graft in backoff")
            self._queue_prune(topic, peer, self.params.prune_backoff)
            return
        if self.score.score(peer) < 0:
            self._queue_prune(topic, peer, self.params.prune_backoff)
            return
        if len(mesh) >= self.params.D_hi and peer not in self.outbound:
            self._queue_prune(topic, peer, self.params.prune_backoff, px=self.params.do_px)
            return
        mesh.add(peer)
        self.score.graft(peer, topic)
        self.io.trace("graft", peer=peer, topic=topic)

    def _on_prune(self, peer: str, prune: ControlPrune) -> None:
        topic = prune.topicID
        if topic not in self.mesh:
            return  # go: a PRUNE for a topic we have not joined is ignored, PX included
        if peer in self.mesh[topic]:
            self.mesh[topic].discard(peer)
            self.score.prune(peer, topic)
            self.io.trace("prune", peer=peer, topic=topic)
        # go obeys the peer's backoff if it gives one above 0, else uses its own
        backoff = prune.backoff if prune.backoff > 0 else self.params.prune_backoff
        self.backoff[(topic, peer)] = max(self.backoff.get((topic, peer), -math.inf), self.clock() + backoff)
        if prune.peers and (not self.params.scoring.enabled or self._above(peer, "accept_px_threshold")):
            self._connect_px(list(prune.peers))

    def _connect_px(self, infos: list) -> None:
        """go's pxConnect: at most prune_peers of them, chosen at random, and not those connected.
        Only peers whose address this node was given can be dialled (no signed peer records here)."""
        if len(infos) > self.params.prune_peers:
            self.rng.shuffle(infos)
            infos = infos[:self.params.prune_peers]
        for info in infos:
            node = self.ids.node_of(info.peerID)
            if node is not None and node != self.node_id and node not in self.peer_topics:
                self.io.connect(node)
