"""GossipSub's control messages as received: GRAFT and PRUNE (with backoff, PX and penalties), IHAVE
and IWANT (with per-heartbeat limits and promises), IDONTWANT. A part of the GossipSub core
(node/protocols/gossipsub.py), kept apart so each piece reads on its own."""
from __future__ import annotations

import math

from node.proto.pubsub_pb2 import (
    RPC,
    ControlIDontWant,
    ControlIHave,
    ControlIWant,
    ControlMessage,
    ControlPrune,
)


class ControlHandling:
    """Handlers of received control; mixed into GossipSub, whose state and helpers it uses."""

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
