"""GossipSub v1.1 peer scoring (spec `gossipsub-v1.1.md`, "Peer Scoring"): the P1..P7 counters, their
decay, and the score function. Pure bookkeeping: the router (`gossipsub.py`) reports what happened
(graft, prune, first and near-first deliveries, invalid messages, behaviour penalties, peers coming
and going) and asks for scores; the clock is the router's.

    score = sum over topics of topic_weight x (w1 P1 + w2 P2 + w3 P3 + w3b P3b + w4 P4)  [capped]
          + w5 P5 + w6 P6 + w7 P7

P1 time in mesh (quantum units, capped), P2 first message deliveries (decayed, capped), P3 mesh
message delivery deficit squared (after activation, below threshold), P3b sticky mesh failure penalty,
P4 invalid messages squared, P5 application score (static, from the scenario), P6 IP colocation
surplus squared, P7 behaviour penalty above its threshold squared. Scoring off (the default, as in
go-libp2p-pubsub) means every score is 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from pydantic import Field, model_validator

from node.protocols.base import Params


class TopicScoreParams(Params):
    topic_weight: float = Field(1.0, ge=0)
    time_in_mesh_weight: float = Field(0.01, ge=0)
    time_in_mesh_quantum: float = Field(1.0, gt=0, description="seconds per P1 unit")
    time_in_mesh_cap: float = Field(3600.0, gt=0)
    first_message_deliveries_weight: float = Field(1.0, ge=0)
    first_message_deliveries_decay: float = Field(0.9, gt=0, lt=1)
    first_message_deliveries_cap: float = Field(100.0, gt=0)
    # P3/P3b must be tuned to the topic's message rate (a quiet topic starves every mesh peer), so
    # they are off unless weighted
    mesh_message_deliveries_weight: float = Field(0.0, le=0)
    mesh_message_deliveries_decay: float = Field(0.9, gt=0, lt=1)
    mesh_message_deliveries_cap: float = Field(100.0, gt=0)
    mesh_message_deliveries_threshold: float = Field(1.0, ge=0)
    mesh_message_deliveries_window: float = Field(0.01, ge=0, description="seconds after the first delivery a mesh peer's copy still counts")
    mesh_message_deliveries_activation: float = Field(5.0, ge=0, description="seconds in the mesh before P3 applies")
    mesh_failure_penalty_weight: float = Field(0.0, le=0)
    mesh_failure_penalty_decay: float = Field(0.9, gt=0, lt=1)
    invalid_message_deliveries_weight: float = Field(-10.0, le=0)
    invalid_message_deliveries_decay: float = Field(0.99, gt=0, lt=1)


class ScoreParams(Params):
    enabled: bool = Field(False, description="off: every score is 0 (go-libp2p-pubsub's default)")
    topics: dict[str, TopicScoreParams] = Field(default_factory=dict, description="per-topic parameters")
    default_topic: TopicScoreParams = Field(default_factory=TopicScoreParams, description="for topics not listed")
    topic_score_cap: float = Field(0.0, ge=0, description="cap on the positive topic part; 0: none")
    app_specific_weight: float = 1.0
    app_specific_scores: dict[str, float] = Field(default_factory=dict, description="P5 per peer id")
    ip_colocation_factor_weight: float = Field(-1.0, le=0)
    ip_colocation_factor_threshold: int = Field(1, ge=1)
    behaviour_penalty_weight: float = Field(-1.0, le=0)
    behaviour_penalty_threshold: float = Field(0.0, ge=0)
    behaviour_penalty_decay: float = Field(0.99, gt=0, lt=1)
    decay_interval: float = Field(1.0, gt=0, description="seconds")
    decay_to_zero: float = Field(0.01, gt=0)
    retain_score: float = Field(3600.0, ge=0, description="seconds a disconnected peer's counters are kept")
    gossip_threshold: float = Field(-10.0, le=0, description="below: no gossip to or from the peer")
    publish_threshold: float = Field(-50.0, le=0, description="below: no flood publish to the peer")
    graylist_threshold: float = Field(-80.0, le=0, description="below: the peer's RPCs are dropped")
    accept_px_threshold: float = Field(10.0, ge=0, description="PX accepted only from peers at or above")
    opportunistic_graft_threshold: float = Field(5.0, ge=0, description="graft better peers when the mesh median is below")

    @model_validator(mode="after")
    def _ordered(self) -> "ScoreParams":
        if not self.graylist_threshold < self.publish_threshold <= self.gossip_threshold <= 0:
            raise ValueError("thresholds must satisfy graylist < publish <= gossip <= 0 "
                             f"(got {self.graylist_threshold}, {self.publish_threshold}, {self.gossip_threshold})")
        return self

    def topic(self, name: str) -> TopicScoreParams:
        return self.topics.get(name, self.default_topic)


@dataclass
class _TopicStats:
    in_mesh: bool = False
    graft_time: float = 0.0
    first_deliveries: float = 0.0
    mesh_deliveries: float = 0.0
    mesh_failure: float = 0.0
    invalid: float = 0.0


@dataclass
class _PeerStats:
    connected: bool = True
    expire: float = math.inf
    ip: str | None = None
    penalty: float = 0.0
    topics: dict[str, _TopicStats] = field(default_factory=dict)


@dataclass
class _Delivery:
    first: float
    first_peer: str
    valid: bool | None = None          # None: not validated yet; False: rejected
    peers: set[str] = field(default_factory=set)


class PeerScore:
    """The P1..P7 counters for every peer; `score(peer)` is 0 for everyone when scoring is off."""

    def __init__(self, params: ScoreParams, clock: Callable[[], float]):
        self.p = params
        self.clock = clock
        self.peers: dict[str, _PeerStats] = {}
        self.by_ip: dict[str, set[str]] = {}
        self.deliveries: dict[str, _Delivery] = {}
        self.last_decay = clock()

    # peers ---------------------------------------------------------------------------------------
    def add_peer(self, peer: str, ip: str | None) -> None:
        st = self.peers.get(peer)
        if st is None:
            st = self.peers[peer] = _PeerStats()
        st.connected, st.expire, st.ip = True, math.inf, ip
        if ip:
            self.by_ip.setdefault(ip, set()).add(peer)

    def remove_peer(self, peer: str) -> None:
        st = self.peers.get(peer)
        if st is None:
            return
        if st.ip:
            self.by_ip.get(st.ip, set()).discard(peer)
        for topic, ts in st.topics.items():
            if ts.in_mesh:
                self.prune(peer, topic)
            ts.first_deliveries = 0.0  # only negative state is retained (spec)
        st.connected, st.expire = False, self.clock() + self.p.retain_score

    # mesh ----------------------------------------------------------------------------------------
    def graft(self, peer: str, topic: str) -> None:
        ts = self._topic(peer, topic)
        if ts is not None:
            ts.in_mesh, ts.graft_time = True, self.clock()

    def prune(self, peer: str, topic: str) -> None:
        ts = self._topic(peer, topic)
        if ts is None or not ts.in_mesh:
            return
        tp = self.p.topic(topic)
        if self._p3_active(ts, tp) and ts.mesh_deliveries < tp.mesh_message_deliveries_threshold:
            ts.mesh_failure += (tp.mesh_message_deliveries_threshold - ts.mesh_deliveries) ** 2
        ts.in_mesh = False

    # messages ------------------------------------------------------------------------------------
    def first_seen(self, msg_id: str, peer: str) -> None:
        """A new message arrived from `peer` (not yet validated)."""
        self.deliveries[msg_id] = _Delivery(self.clock(), peer, None, {peer})

    def validated(self, msg_id: str, topic: str, valid: bool | None) -> None:
        """The verdict: True accept, False reject (P4 for every peer that sent it), None ignore."""
        rec = self.deliveries.get(msg_id)
        if rec is None:
            return
        rec.valid = valid
        if valid is False:
            for peer in rec.peers:
                self._invalid(peer, topic)
        elif valid:
            ts = self._topic(rec.first_peer, topic)
            if ts is not None:
                tp = self.p.topic(topic)
                ts.first_deliveries = min(ts.first_deliveries + 1, tp.first_message_deliveries_cap)
                if ts.in_mesh:
                    ts.mesh_deliveries = min(ts.mesh_deliveries + 1, tp.mesh_message_deliveries_cap)

    def duplicate(self, msg_id: str, topic: str, peer: str) -> None:
        rec = self.deliveries.get(msg_id)
        if rec is None or peer in rec.peers:
            return
        rec.peers.add(peer)
        if rec.valid is False:
            self._invalid(peer, topic)
        elif rec.valid and self.clock() - rec.first <= self.p.topic(topic).mesh_message_deliveries_window:
            ts = self._topic(peer, topic)
            if ts is not None and ts.in_mesh:  # a near-first copy from a mesh peer counts for P3
                ts.mesh_deliveries = min(ts.mesh_deliveries + 1, self.p.topic(topic).mesh_message_deliveries_cap)

    def rejected(self, peer: str, topic: str) -> None:
        """An invalid message from `peer` that never reached the delivery record (e.g. bad fragment)."""
        self._invalid(peer, topic)

    def add_penalty(self, peer: str, amount: float) -> None:
        st = self.peers.get(peer)
        if st is not None:
            st.penalty += amount

    def penalty(self, peer: str) -> float:
        st = self.peers.get(peer)
        return st.penalty if st else 0.0

    # time ----------------------------------------------------------------------------------------
    def refresh(self, seen_ttl: float) -> None:
        """Called from the heartbeat: decay once per decay_interval elapsed, expire retained peers and
        old delivery records."""
        now = self.clock()
        while now - self.last_decay >= self.p.decay_interval:
            self.last_decay += self.p.decay_interval
            self._decay()
        for peer in [p for p, st in self.peers.items() if not st.connected and st.expire <= now]:
            del self.peers[peer]
        for mid in [m for m, rec in self.deliveries.items() if now - rec.first > seen_ttl]:
            del self.deliveries[mid]

    def _decay(self) -> None:
        def fade(value: float, factor: float) -> float:
            value *= factor
            return 0.0 if value < self.p.decay_to_zero else value
        for st in self.peers.values():
            st.penalty = fade(st.penalty, self.p.behaviour_penalty_decay)
            for topic, ts in st.topics.items():
                tp = self.p.topic(topic)
                ts.first_deliveries = fade(ts.first_deliveries, tp.first_message_deliveries_decay)
                ts.mesh_deliveries = fade(ts.mesh_deliveries, tp.mesh_message_deliveries_decay)
                ts.mesh_failure = fade(ts.mesh_failure, tp.mesh_failure_penalty_decay)
                ts.invalid = fade(ts.invalid, tp.invalid_message_deliveries_decay)

    # the score -----------------------------------------------------------------------------------
    def score(self, peer: str) -> float:
        if not self.p.enabled:
            return 0.0
        st = self.peers.get(peer)
        if st is None:
            return 0.0
        now = self.clock()
        topic_part = 0.0
        for topic, ts in st.topics.items():
            tp = self.p.topic(topic)
            p1 = min((now - ts.graft_time) / tp.time_in_mesh_quantum, tp.time_in_mesh_cap) if ts.in_mesh else 0.0
            p3 = 0.0
            if self._p3_active(ts, tp) and ts.mesh_deliveries < tp.mesh_message_deliveries_threshold:
                p3 = (tp.mesh_message_deliveries_threshold - ts.mesh_deliveries) ** 2
            s = (tp.time_in_mesh_weight * p1 + tp.first_message_deliveries_weight * ts.first_deliveries
                 + tp.mesh_message_deliveries_weight * p3 + tp.mesh_failure_penalty_weight * ts.mesh_failure
                 + tp.invalid_message_deliveries_weight * ts.invalid ** 2)
            topic_part += tp.topic_weight * s
        if self.p.topic_score_cap > 0:
            topic_part = min(topic_part, self.p.topic_score_cap)
        p5 = self.p.app_specific_scores.get(peer, 0.0)
        p6 = 0.0
        if st.ip:
            surplus = len(self.by_ip.get(st.ip, ())) - self.p.ip_colocation_factor_threshold
            p6 = surplus ** 2 if surplus > 0 else 0.0
        excess = st.penalty - self.p.behaviour_penalty_threshold
        p7 = excess ** 2 if excess > 0 else 0.0
        return (topic_part + self.p.app_specific_weight * p5 + self.p.ip_colocation_factor_weight * p6
                + self.p.behaviour_penalty_weight * p7)

    # helpers -------------------------------------------------------------------------------------
    def _topic(self, peer: str, topic: str) -> _TopicStats | None:
        st = self.peers.get(peer)
        return None if st is None else st.topics.setdefault(topic, _TopicStats())

    def _p3_active(self, ts: _TopicStats, tp: TopicScoreParams) -> bool:
        return ts.in_mesh and self.clock() - ts.graft_time >= tp.mesh_message_deliveries_activation

    def _invalid(self, peer: str, topic: str) -> None:
        ts = self._topic(peer, topic)
        if ts is not None:
            ts.invalid += 1
