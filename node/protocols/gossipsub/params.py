"""GossipSub's parameters: the spec's mesh and gossip degrees and windows, v1.2's IDONTWANT, message ids
and signing, direct peers and peer exchange, the large-message extensions (staggering, fragmentation),
scoring and validation; the named variants that switch the extensions together, and the named presets
that set every parameter as a reference does.

The defaults are go-libp2p-pubsub's (gossipsub.go's DefaultGossipSubParams, its router's defaults:
flood publish and peer exchange off, StrictSign, from || seqno ids, 120 s seen cache, 1 MiB RPCs) with
v1.2's IDONTWANT on; `preset: go-defaults` pins them all, whatever peerlab's defaults become."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from node.protocols.gossipsub.score import ScoreParams
from node.protocols.pubsub.topic_core import TopicParams
from node.protocols.pubsub.validators import ValidationParams

GO_DEFAULTS = {
    "D": 6, "D_lo": 5, "D_hi": 12, "D_score": 4, "D_out": 2, "D_lazy": 6, "history_length": 5,
    "history_gossip": 3, "gossip_factor": 0.25, "gossip_retransmission": 3, "heartbeat_initial_delay": 0.1,
    "heartbeat_interval": 1.0, "fanout_ttl": 60.0, "prune_peers": 16, "prune_backoff": 60.0,
    "unsubscribe_backoff": 10.0, "direct_connect_ticks": 300, "opportunistic_graft_ticks": 60,
    "opportunistic_graft_peers": 2, "graft_flood_threshold": 10.0, "max_ihave_length": 5000,
    "max_ihave_messages": 10, "max_idontwant_length": 10, "max_idontwant_messages": 1000,
    "iwant_followup_time": 3.0, "idontwant_rule": "go", "idontwant_threshold": 1024,
    "idontwant_ttl": 3, "flood_publish": False, "do_px": False, "msg_id": "from-seqno", "sign": True,
    "seen_ttl": 120.0, "max_rpc_size": 1 << 20,
}
PRESETS = {
    "go-defaults": GO_DEFAULTS,
    # the GossipSub seed's Table II (its simulations, nim-libp2p in Shadow): D 8, D_lo 6, D_hi 12,
    # D_lazy 6, gossip factor 0.05, heartbeat 1 s, stagger interval 200 ms, flood publish off; the rest
    # as go's defaults
    "table-ii": {**GO_DEFAULTS, "D": 8, "D_lo": 6, "D_hi": 12, "D_lazy": 6, "gossip_factor": 0.05,
                 "heartbeat_interval": 1.0, "stagger_interval": 0.2, "flood_publish": False},
}

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
    preset: Literal[tuple(PRESETS)] | None = Field(  # type: ignore[valid-type]
        None, description="go-defaults: every parameter as go-libp2p-pubsub's defaults; table-ii: the "
                          "GossipSub seed's Table II (explicit values win)")
    variant: Literal[tuple(VARIANTS)] = Field(  # type: ignore[valid-type]
        "v1.2", description="preset for idontwant, stagger_parallel and fragments (explicit values win)")
    D: int = Field(6, ge=0, description="0 with D_lo, D_hi and D_out 0: a bootstrapper that keeps no mesh")
    D_lo: int = Field(5, ge=0)
    D_hi: int = Field(12, ge=0)
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
    flood_publish: bool = False
    do_px: bool = Field(False, description="send peer exchange (up to prune_peers peer ids) with a PRUNE")
    prune_peers: int = Field(16, ge=0, description="peers sent in, and dialled from, one PRUNE's PX")
    direct_peers: list[str] = Field(default_factory=list, description="node ids always sent every "
                                    "message, never grafted or pruned, redialled every direct_connect_ticks")
    direct_connect_ticks: int = Field(300, ge=1)
    max_ihave_length: int = Field(5000, ge=1)
    max_ihave_messages: int = Field(10, ge=1)
    iwant_followup_time: float = Field(3.0, gt=0)
    gossip_retransmission: int = Field(3, ge=1)
    opportunistic_graft_ticks: int = Field(60, ge=1)
    opportunistic_graft_peers: int = Field(2, ge=0)
    max_rpc_size: int = Field(1024 * 1024, gt=0, description="bytes; larger RPCs are dropped (go/nim: 1 MiB)")
    msg_id: Literal["from-seqno", "hash", "short"] = Field(
        "from-seqno", description="from-seqno: libp2p's from || seqno (46 bytes); hash: SHA-256 of the data, "
                                  "20 bytes; short: peerlab's earlier `n3-5` text ids, unsigned")
    sign: bool = Field(True, description="StrictSign: sign every message with the origin's Ed25519 key and "
                                         "reject unsigned or badly signed ones (false: LaxNoSign)")
    # v1.2
    idontwant: bool = True
    idontwant_rule: Literal["go", "nim"] = Field("go", description="size threshold: go 1024 B; nim max(512, 10 x id length)")
    idontwant_threshold: int = Field(1024, ge=0, description="go rule: bytes")
    idontwant_ttl: int = Field(3, ge=1, description="heartbeats a received IDONTWANT is kept")
    max_idontwant_messages: int = Field(1000, ge=1, description="IDONTWANT RPCs accepted per peer per heartbeat")
    max_idontwant_length: int = Field(10, ge=1, description="ids honoured per IDONTWANT RPC")
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

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") is not None:
            base = PRESETS.get(data["preset"])
            if base is not None:  # an unknown name is the Literal's error
                return {**base, **data}
        return data

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
        if "sign" not in explicit and self.msg_id == "short":
            self.__dict__["sign"] = False
        if self.sign and self.msg_id == "short":
            raise ValueError("sign: short ids carry node ids in `from`, not peer ids, so messages cannot be "
                             "signed; use msg_id: from-seqno or hash, or sign: false")
        bootstrapper = self.D == self.D_lo == self.D_hi == self.D_out == 0  # go: keeps no mesh
        if bootstrapper:
            self.__dict__["D_score"] = 0
            return self
        if self.D == 0 or self.D_hi == 0:
            raise ValueError("D and D_hi may be 0 only together with D_lo and D_out (a bootstrapper, as go "
                             f"allows; got D {self.D}, D_lo {self.D_lo}, D_hi {self.D_hi}, D_out {self.D_out})")
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
