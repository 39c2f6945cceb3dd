"""GossipSub's mesh membership: grafting and pruning a peer (with backoff and peer exchange, as go's
makePrune), direct peers, the topic peers eligible for the mesh and the fanout, score thresholds
and backoff. A part of the GossipSub core (node/protocols/gossipsub/core.py), mixed in as the heartbeat
and control handling are."""
from __future__ import annotations

import math

from node.protocols.gossipsub.state import GossipSubState
from node.protocols.pubsub.pubsub_pb2 import ControlGraft, ControlPrune, PeerInfo


class MeshMembership(GossipSubState):
    """Who is in a topic's mesh or fanout, and the GRAFT/PRUNE this sends; uses GossipSub's state."""

    def _graft(self, topic: str, peer: str) -> None:
        self.mesh.setdefault(topic, set()).add(peer)
        self.score.graft(peer, topic)
        self._pending(peer).graft.append(ControlGraft(topicID=topic))
        self.io.trace("graft", peer=peer, topic=topic)

    def _prune_peer(self, topic: str, peer: str, px: bool) -> None:
        self.mesh[topic].discard(peer)
        self.score.prune(peer, topic)
        self._queue_prune(topic, peer, self.params.prune_backoff, px)
        self.io.trace("prune", peer=peer, topic=topic)

    def _queue_prune(self, topic: str, peer: str, backoff: float, px: bool = False) -> None:
        self.backoff[(topic, peer)] = self.clock() + backoff
        self.last_prune[(topic, peer)] = self.clock()
        prune = ControlPrune(topicID=topic, backoff=int(backoff))
        if px:  # go's makePrune: up to prune_peers topic peers with a non-negative score, shuffled
            others = [x for x in self._topic_peers(topic) if x != peer and self.score.score(x) >= 0]
            self.rng.shuffle(others)
            prune.peers.extend(PeerInfo(peerID=self.ids.peer_id(x)) for x in others[:self.params.prune_peers])
        self._pending(peer).prune.append(prune)

    def _direct_in(self, topic: str) -> set[str]:
        return {x for x in self.direct if topic in self.peer_topics.get(x, ())}

    def _connect_direct(self) -> None:
        for peer in sorted(self.direct - set(self.peer_topics)):
            self.io.connect(peer)

    def _topic_peers(self, topic: str) -> list[str]:
        return sorted(p for p, ts in self.peer_topics.items() if topic in ts)

    def _graft_candidates(self, topic: str, score: dict[str, float]) -> list[str]:
        """Topic peers outside the mesh, not backing off, with a non-negative score; shuffled."""
        mesh = self.mesh.get(topic, set())
        out = [x for x in self._topic_peers(topic) if x not in mesh and x not in self.direct
               and not self._backing_off(topic, x) and score.get(x, 0.0) >= 0]
        self.rng.shuffle(out)
        return out

    def _fill_fanout(self, topic: str, fan: set[str]) -> None:
        if len(fan) < self.params.D:
            extra = [x for x in self._topic_peers(topic)
                     if x not in fan and x not in self.direct and self._above(x, "publish_threshold")]
            self.rng.shuffle(extra)
            fan |= set(extra[:self.params.D - len(fan)])

    def _above(self, peer: str, threshold: str) -> bool:
        """score(peer) >= the named threshold; always true with scoring off."""
        sp = self.params.scoring
        return not sp.enabled or self.score.score(peer) >= getattr(sp, threshold)

    def _backing_off(self, topic: str, peer: str) -> bool:
        return self.backoff.get((topic, peer), -math.inf) > self.clock()
