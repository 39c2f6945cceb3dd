"""topiary: a node that learns its own neighbours (Topiary paper, Algorithm 1).

Dissemination is the static overlay's TTL gossip. On top of it the node:
- keeps at most `degree` outgoing connections (d; the planner sets it from topology.degree) and
  accepts every incoming one; links carry data both ways;
- observes, for every message it receives, when each neighbour's copy arrived (eq. 1), and per
  topic how many messages it should have had (E_theta: messages received plus the gaps the
  origin's per-topic sequence numbers reveal, the seed's suggestion);
- at the end of each epoch (a duration, or a number of messages first seen here) scores every
  subset of round(keep_fraction x d) of its outgoing neighbours (eqs. 2-5, see score.py for the
  cost reading), keeps the best, drops the other outgoing links and explores replacements sampled
  in proportion to omega_u (eqs. 6-10) from the directory of all nodes and their subscriptions.

The directory (every node and its topics) is the seed's model assumption; peerlab plans it and
hands it to the node (`ProtocolIO.directory`). Nodes already connected to us inbound are not
explored (a second slot on the same link adds nothing). Messages first seen less than `settle`
seconds before an epoch ends wait for the next one, so late copies are not counted as missing.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from node.protocols.overlays.gossip_pb2 import GossipMessage
from node.protocols.overlays.static import StaticOverlay, StaticOverlayParams
from node.protocols.topiary import score as ts

GAP_MEMORY = 4096  # remembered (origin, topic, seq) gaps per node


class TopiaryParams(StaticOverlayParams):
    degree: int = Field(6, gt=0, le=64, description="d: outgoing connections (the planner sets it from "
                                                    "topology.degree)")
    keep_fraction: float = Field(0.6, gt=0, le=1, description="kept subset size = round(keep_fraction x d)")
    epoch: float | None = Field(10.0, gt=0, description="epoch length in seconds (counted from the first "
                                                        "message seen); null to use epoch_messages")
    epoch_messages: int | None = Field(None, gt=0, description="or: an epoch ends after this many "
                                                               "messages first seen here")
    settle: float = Field(1.0, ge=0, description="messages first seen this close to an epoch's end are "
                                                 "scored in the next one")
    w_c: float = Field(1.0, ge=0, description="weight of the coverage term Fc")
    w_d: float = Field(10.0, ge=0, description="weight of the delay term Fd, per second")
    w_w: float = Field(0.0, ge=0, description="weight of the bandwidth-waste term Fw, per message")
    eta: float = Field(1.5, gt=1, description="eta: topics scoring above eta x the best are underperforming")

    @model_validator(mode="after")
    def _one_epoch_kind(self) -> "TopiaryParams":
        if self.epoch_messages is not None:
            self.epoch = None
        if self.epoch is None and self.epoch_messages is None:
            raise ValueError("give epoch (seconds) or epoch_messages")
        return self


class Topiary(StaticOverlay):
    name = "topiary"
    Params = TopiaryParams
    topology = "random"  # Topiary starts from a random graph of d outgoing links per node
    uses_directory = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.weights = ts.Weights(self.params.w_c, self.params.w_d, self.params.w_w)
        self.chosen: set[str] = set()       # our outgoing picks (connected or being dialled)
        self.inbound: set[str] = set()
        self.observations: dict[str, ts.Observation] = {}
        self.received: dict[str, int] = {}  # interested messages first seen this epoch, by topic
        self.gaps: dict[tuple[str, str, int], int] = {}  # (origin, topic, seq) -> epoch it went missing
        self.last_seq: dict[tuple[str, str], int] = {}
        self.epoch_index = 0
        self.epoch_started: float | None = None
        self.seen_in_epoch = 0

    # connections -------------------------------------------------------------------------------
    def on_peer_up(self, peer: str, outbound: bool) -> None:
        super().on_peer_up(peer, outbound)
        if outbound:
            self.chosen.add(peer)
        else:
            self.inbound.add(peer)

    def on_peer_down(self, peer: str) -> None:
        super().on_peer_down(peer)
        self.inbound.discard(peer)  # a chosen peer stays chosen: the transport dials it again

    # messages ----------------------------------------------------------------------------------
    def publish(self, topic: str, data: bytes) -> str:
        self._epoch_clock()
        return super().publish(topic, data)

    def _on_message(self, peer: str, msg: GossipMessage) -> None:
        msg_id = f"{msg.origin}-{msg.seqno}"
        now = self.clock()
        obs = self.observations.get(msg_id)
        if obs is not None:
            obs.arrivals.setdefault(peer, now)
        elif msg.origin != self.node_id and msg_id not in self.seen:
            self._epoch_clock()
            self.observations[msg_id] = ts.Observation(msg.topic, now, {peer: now})
            self._count_expected(msg)
            self.seen_in_epoch += 1
        super()._on_message(peer, msg)
        if self.params.epoch_messages and self.seen_in_epoch >= self.params.epoch_messages:
            self._end_epoch()

    def _count_expected(self, msg: GossipMessage) -> None:
        if msg.topic not in self.topics:
            return
        self.received[msg.topic] = self.received.get(msg.topic, 0) + 1
        key = (msg.origin, msg.topic)
        seq = msg.topic_seq
        self.gaps.pop((msg.origin, msg.topic, seq), None)  # a late message fills its gap
        last = self.last_seq.get(key, 0)
        for missing in range(last + 1, seq):
            self.gaps[(msg.origin, msg.topic, missing)] = self.epoch_index
        self.last_seq[key] = max(last, seq)
        while len(self.gaps) > GAP_MEMORY:
            del self.gaps[next(iter(self.gaps))]

    # epochs ------------------------------------------------------------------------------------
    def _epoch_clock(self) -> None:
        """Epochs count from the first message this node sees or sends."""
        if self.epoch_started is None:
            self.epoch_started = self.clock()
            if self.params.epoch:
                self.io.set_timer(self.params.epoch, "epoch")

    def on_timer(self, name: str, data: Any) -> None:
        if name == "epoch":
            self._end_epoch()
            self.io.set_timer(self.params.epoch, "epoch")

    def expected(self) -> dict[str, float]:
        """E_theta for this epoch: interested messages received + unfilled gaps that opened in it."""
        out = {t: float(c) for t, c in self.received.items()}
        for (_, topic, _), epoch in self.gaps.items():
            if epoch == self.epoch_index:
                out[topic] = out.get(topic, 0.0) + 1
        return out

    def _end_epoch(self) -> None:
        now = self.clock()
        cutoff = now - self.params.settle
        scored = [o for o in self.observations.values() if o.first <= cutoff]
        carried = {m: o for m, o in self.observations.items() if o.first > cutoff}
        expected = self.expected()
        for obs in carried.values():  # their E_theta share moves with them
            if obs.topic in expected:
                expected[obs.topic] = max(0.0, expected[obs.topic] - 1)
        k = max(0, round(self.params.keep_fraction * self.params.degree))
        kept, best = ts.best_subset(self.chosen, k, scored, self.topics, expected, self.weights)
        per_topic = ts.topic_scores(kept, scored, self.topics, expected, self.weights)
        sigma_plus = ts.underperforming(per_topic, self.params.eta)
        dropped = sorted(self.chosen - set(kept))
        for peer in dropped:
            self.io.disconnect(peer)
        self.chosen = set(kept)
        directory = self.io.directory()
        exclude = self.chosen | self.inbound | {self.node_id}
        need = max(0, self.params.degree - len(self.chosen))
        weights = ts.exploration_weights(sigma_plus, directory, exclude)
        explored = ts.weighted_sample(weights, need, self.rng)
        if len(explored) < need:  # no underperforming topic (or too few nodes sharing one): any node
            rest = {u: 1 for u in directory if u not in exclude and u not in explored}
            explored += ts.weighted_sample(rest, need - len(explored), self.rng)
        for peer in explored:
            self.chosen.add(peer)
            self.io.connect(peer)
        self.io.trace("topiary_epoch", epoch=self.epoch_index, messages=len(scored), score=best.total,
                      cover_miss=best.coverage, delay_rel=best.delay, waste=best.waste,
                      kept=",".join(kept), dropped=",".join(dropped), explored=",".join(explored),
                      underperforming=len(sigma_plus))
        self.epoch_index += 1
        self.observations = carried
        self.received = {}
        for obs in carried.values():
            if obs.topic in self.topics:
                self.received[obs.topic] = self.received.get(obs.topic, 0) + 1
        self.seen_in_epoch = len(carried)
        self.gaps = {g: e for g, e in self.gaps.items() if e >= self.epoch_index - 2}

    def status(self) -> dict[str, Any]:
        return {**super().status(), "epoch": self.epoch_index, "outgoing": sorted(self.chosen)}
