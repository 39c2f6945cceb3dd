"""GossipSub's parameters: the spec's mesh and gossip degrees and windows, v1.2's IDONTWANT, the
large-message extensions (staggering, fragmentation), scoring and validation, and the named variants
that switch the extensions together."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .gossipsub_score import ScoreParams
from .topic_core import TopicParams
from .validators import ValidationParams

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
        # defaults that follow from the variant: set without marking them as the user's (fields_set)
        if "idontwant" not in explicit:
            self.__dict__["idontwant"] = idw
        if "stagger_parallel" not in explicit:
            self.__dict__["stagger_parallel"] = stagger
        if "fragments" not in explicit:
            self.__dict__["fragments"] = frags
        if not self.D_lo <= self.D <= self.D_hi:
            raise ValueError(f"need D_lo <= D <= D_hi (got {self.D_lo}, {self.D}, {self.D_hi})")
        if "D_score" not in explicit:
            self.__dict__["D_score"] = min(self.D_score, self.D)
        if self.D_score > self.D:
            raise ValueError(f"D_score ({self.D_score}) cannot exceed D ({self.D})")
        if self.D_out >= self.D_lo and self.D_lo > 0:
            raise ValueError(f"D_out ({self.D_out}) must be below D_lo ({self.D_lo})")
        if self.history_gossip > self.history_length:
            raise ValueError("history_gossip cannot exceed history_length")
        return self
