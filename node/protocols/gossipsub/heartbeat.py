"""GossipSub's heartbeat: mesh maintenance (prune to D once the mesh reaches D_hi, graft below D_lo,
outbound quota, opportunistic grafting, scores), direct peers' reconnection, fanout expiry, IHAVE gossip
from the message cache windows, promise and IDONTWANT expiry, and flushing piggybacked control, in
go-libp2p-pubsub's order and with its counting (gossipsub.go heartbeat, emitGossip). A part of the GossipSub core
(node/protocols/gossipsub/core.py), kept apart so each piece reads on its own."""
from __future__ import annotations

from node.protocols.gossipsub.state import GossipSubState
from node.protocols.pubsub.pubsub_pb2 import (
    ControlIHave,
)


class Heartbeat(GossipSubState):
    """The periodic work; mixed into GossipSub, whose state and helpers it uses."""

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
        for mid, peers in list(self.promises.items()):
            for peer, deadline in list(peers.items()):
                if deadline < now:  # a broken IWANT promise: one per IWANT (go's gossip tracer)
                    del peers[peer]
                    broken[peer] = broken.get(peer, 0) + 1
            if not peers:
                del self.promises[mid]
        for peer, count in sorted(broken.items()):
            self._add_penalty(peer, count, "broken promise")
        if self.direct and self.tick % p.direct_connect_ticks == 0:
            self._connect_direct()
        self.score.refresh(p.seen_ttl)
        score = {x: self.score.score(x) for x in self.peer_topics}

        for topic in sorted(self.mesh):
            mesh = self.mesh[topic]
            mesh &= set(self.peer_topics)
            for peer in sorted(x for x in mesh if score[x] < 0):
                self._prune_peer(topic, peer, px=False)
            if len(mesh) < p.D_lo:
                candidates = self._graft_candidates(topic, score)
                for peer in candidates[:p.D - len(mesh)]:
                    self._graft(topic, peer)
            if len(mesh) >= p.D_hi:  # go prunes once the mesh reaches D_hi (a bootstrapper's 0 included)
                keep = sorted(mesh)  # a set iterates in hash order, which differs between processes
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
                    self._prune_peer(topic, peer, px=p.do_px)
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
                          if x not in exclude and x not in self.direct and self._above(x, "gossip_threshold")]
            self.rng.shuffle(candidates)
            count = max(p.D_lazy, int(p.gossip_factor * len(candidates)))  # go truncates
            for peer in candidates[:count]:
                chosen = ids if len(ids) <= p.max_ihave_length else self.rng.sample(ids, p.max_ihave_length)
                self._pending(peer).ihave.append(ControlIHave(topicID=topic, messageIDs=[self.ids.to_wire(m) for m in chosen]))
