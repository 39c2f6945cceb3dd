"""The sans-IO protocol core contract (modelled on h11/wsproto).

A core is a plain object driven by inputs - peer up/down, frame received, timer fired, app
subscribe/unsubscribe/publish - that acts only through the injected `ProtocolIO`. It is given a
clock (seconds, float) and a `random.Random`; it never touches sockets, asyncio or the wall clock.
The asyncio runtime (`node.process.runtime`) is one driver, the simulated network
(`node.simulated.virtual_network`) another.
"""
from __future__ import annotations

import random
from typing import Any, Callable, ClassVar, Protocol

from google.protobuf.message import DecodeError
from pydantic import BaseModel, ConfigDict

from node.identity import Identities


class ProtocolIO(Protocol):
    """Everything a core may do to the outside world."""

    def send(self, peer: str, payload: bytes, priority: bool = False) -> None:
        """Queue one protocol frame (already encoded) to a connected peer; `priority` frames (small
        control such as IDONTWANT) overtake the peer's queued normal frames."""

    def connect(self, peer: str) -> None:
        """Ask for a data connection to `peer` (on_peer_up follows when it is up)."""

    def disconnect(self, peer: str) -> None:
        """Close the data connection to `peer` (on_peer_down follows)."""

    def set_timer(self, delay: float, name: str, data: Any = None) -> Any:
        """Call core.on_timer(name, data) after `delay` seconds; returns a handle for cancel_timer."""

    def cancel_timer(self, handle: Any) -> None:
        """Forget a timer set earlier."""

    def deliver(self, topic: str, msg_id: str, data: bytes, origin: str) -> None:
        """Hand a message to the application."""

    def trace(self, type_: str, **fields: Any) -> None:
        """Write one event to the node's event log (types and fields from events.schema.json)."""

    def peer_ip(self, peer: str) -> str | None:
        """The IP address a connected peer talks from (GossipSub's P6 groups peers by it)."""

    def backlog(self, peer: str) -> int:
        """Bytes queued to `peer` and not yet handed to the kernel (0 when nothing waits)."""

    def directory(self) -> dict[str, frozenset[str]]:
        """Every other node this one may connect to, with the topics it subscribes to (Topiary's
        model: addresses and subscriptions are known; planned, for cores with `uses_directory`)."""

    def identities(self) -> Identities:
        """Every node's Ed25519 key and libp2p peer id, derived from the run's seed (node/identity.py)."""


def parse_or_drop(io: ProtocolIO, message: Any, payload: bytes, peer: str) -> bool:
    """Parse `payload` into the protobuf `message`; a malformed frame is logged as dropped (False)."""
    try:
        message.ParseFromString(payload)
    except DecodeError:
        io.trace("drop_rpc", peer=peer, bytes=len(payload), reason="malformed")
        return False
    return True


class Unsupported(Exception):
    """The protocol has no such operation (e.g. topics in a pure overlay); the control API answers 400."""


class Params(BaseModel):
    """Base for a protocol's parameters: unknown keys are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")


class ProtocolCore:
    """Base class for cores; subclasses set `name` and `Params` and override the inputs they use."""

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    # The overlay algorithm this protocol always starts from (scenario topology.algorithm must agree
    # or be left out); None: the scenario's topology decides.
    topology: ClassVar[str | None] = None
    # True: the core picks its own neighbours among all nodes, so it is given every node's address
    # and subscriptions (ProtocolIO.directory), not only its planned neighbours.
    uses_directory: ClassVar[bool] = False
    # True: every topic has an author that creates it before anyone subscribes (PulsarCast); the
    # planner names one per topic and the runtime calls create_topic on it at start.
    topic_authors: ClassVar[bool] = False
    # "topic": a message goes to the subscribers of its topic; "predicate": topics are content
    # predicates (node/protocols/content/predicates.py) and a message goes to the subscribers whose filter
    # matches it (the planner and the analysis follow this).
    matching: ClassVar[str] = "topic"
    # "pubsub": frames are libp2p pubsub RPCs (node/protocols/pubsub/wire.py), so the control-plane
    # attack behaviours (node/behaviours.py) can speak to it; None: a wire of its own.
    wire: ClassVar[str | None] = None
    # Operations on a topic the control API offers for this protocol: POST /<name> {"topic": ...}
    # calls the core method of that name (e.g. PulsarCast's history rebuild).
    control_actions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, node_id: str, params: Params, io: ProtocolIO,
                 clock: Callable[[], float], rng: random.Random):
        self.node_id = node_id
        self.params = params
        self.io = io
        self.clock = clock
        self.rng = rng

    # inputs --------------------------------------------------------------------------------------
    def on_start(self) -> None:
        """The node is up (before any peer); set initial timers here."""

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        pass

    def on_peer_down(self, peer: str) -> None:
        pass

    def on_frame(self, peer: str, payload: bytes) -> None:
        pass

    def on_timer(self, name: str, data: Any) -> None:
        pass

    def subscribe(self, topic: str) -> None:
        raise Unsupported(f"{self.name} has no topics")

    def unsubscribe(self, topic: str) -> None:
        raise Unsupported(f"{self.name} has no topics")

    def publish(self, topic: str, data: bytes) -> str:
        """Publish `data` on `topic`; returns the message id."""
        raise Unsupported(f"{self.name} cannot publish")

    def create_topic(self, topic: str) -> str:
        """Author `topic` (protocols with `topic_authors`); returns its id."""
        raise Unsupported(f"{self.name} has no topic authors")

    @staticmethod
    def frame_topics(payload: bytes) -> set[str]:
        """Topics of the messages an encoded frame carries (empty for control-only frames); attack
        behaviours use it to pick what to drop or delay. Malformed frames carry none."""
        return set()

    # for the runtime's /status -------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {}
