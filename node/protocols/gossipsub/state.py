"""GossipSub's state, declared in one place: every field the router keeps, with its type and what it
holds. The parts of the router (core.py, mesh.py, received_control.py, heartbeat.py, large.py) each
subclass it, so each reads and changes the state declared here; none adds fields of its own."""
from __future__ import annotations

from collections import deque
from typing import Any

from node.protocols.gossipsub.params import GossipSubParams
from node.protocols.gossipsub.score import PeerScore
from node.protocols.pubsub.messages import MessageIds
from node.protocols.pubsub.pubsub_pb2 import ControlMessage, Message
from node.protocols.pubsub.topic_core import TopicCore
from node.protocols.pubsub.validators import make_validator


class Stagger:
    """One large message being relayed a few peers at a time."""

    def __init__(self, msg_id: str, payload: bytes, sizes: dict[str, int], targets: list[str]):
        self.msg_id = msg_id
        self.payload = payload
        self.sizes = sizes
        self.pending = deque(targets)
        self.in_flight: set[str] = set()
        self.timers: dict[str, Any] = {}


class GossipSubState(TopicCore):
    """The router's fields (beside the topic core's: topics, peer_topics, seen, seqno)."""

    params: GossipSubParams

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        p = self.params
        self.mesh: dict[str, set[str]] = {}                     # topic -> its mesh peers
        self.fanout: dict[str, set[str]] = {}                   # topic published, not joined -> peers
        self.fanout_last_pub: dict[str, float] = {}             # topic -> last publish (fanout_ttl)
        self.backoff: dict[tuple[str, str], float] = {}         # (topic, peer) -> no GRAFT before
        self.outbound: set[str] = set()                         # peers this node dialled (D_out)
        self.mcache: dict[str, Message] = {}                    # id -> message, for IWANT
        self.mcache_topic: dict[str, str] = {}                  # id -> its topic
        self.history: deque[list[str]] = deque([[] for _ in range(p.history_length)], maxlen=p.history_length)  # ids per heartbeat window
        self.dontwant: dict[str, dict[str, int]] = {}          # peer -> msg id -> expiry tick
        self.idontwant_rpcs: dict[str, int] = {}                # peer -> IDONTWANT RPCs this heartbeat
        self.ihave_count: dict[str, int] = {}                   # peer -> IHAVE RPCs this heartbeat
        self.iwant_asked: dict[str, int] = {}                   # peer -> ids asked for this heartbeat
        self.served: dict[tuple[str, str], int] = {}            # (peer, id) -> IWANT answers given
        self.promises: dict[str, dict[str, float]] = {}         # id -> peer -> deadline (one id per IWANT)
        self.direct: set[str] = set(p.direct_peers) - {self.node_id}  # always sent every message
        self.ids = MessageIds(self.node_id, p.msg_id, p.sign, None if p.msg_id == "short" else self.io.identities())
        self.score = PeerScore(p.scoring, self.clock)
        self.validate = make_validator(p.validation)
        self.last_prune: dict[tuple[str, str], float] = {}      # (topic, peer) -> when pruned (flood threshold)
        self.pending: dict[str, ControlMessage] = {}            # control to piggyback / flush
        self.staggers: dict[str, Stagger] = {}                  # id -> its staggered relay
        self.reassembly: dict[str, dict[str, Any]] = {}         # whole id -> fragments received
        self.tick = 0                                           # heartbeats so far
