"""Attack behaviours that wrap any protocol core (scenario `attackers:`; papers: Topiary paper
section V-D, the GossipSub paper on v1.1 hardening and v1.2 IDONTWANT).

The core runs unchanged. `build()` gives an honest node its core as is; an attacker gets an
`AttackerCore` proxy that sees every input before the core (frames, peers up/down, start) and a
`BehaviourIO` between the core and the real ProtocolIO that edits what it sends. Runtime
(node/process/runtime.py) and simulator (node/simulated/virtual_network.py) both build cores here, so a
behaviour is the same in emulation and simulation.

Forwarding attacks (any protocol; what a frame carries is read with the core's `frame_topics`):
- topic-drop: subscribed to the victim topic (the planner adds it) but never forwards its messages.
- censor: forwards no message at all (control frames and subscriptions still go out: it looks alive).
- slow: every frame carrying a message leaves `delay` seconds late.
- eclipse: forwards honestly; colluders are fully connected and court honest nodes (planned edges),
  and it never drops a link to a fellow colluder, whatever its core decides.
Traffic attacks, `rate` times per second to every connected peer:
- malformed (any protocol): random bytes, truncated real frames, and protobuf with lying lengths, in
  turn; one frame in 50 is larger than the transport's frame limit (peers must close the connection).
- publish-flood (any protocol): publishes valid `size`-byte messages on its topics (`rate` per second
  in all, not per peer); they are real messages, so honest nodes validate and relay them.
Control attacks on the libp2p pubsub wire (gossipsub; floodsub ignores control):
- ihave-spam: IHAVE for `ids` message ids that do not exist, on every topic it knows.
- iwant-spam: IWANT for the `ids` most recent message ids it has seen, again and again.
- graft-spam: GRAFT for every topic, ignoring PRUNE and its backoff.
- idontwant-liar: IDONTWANT for every id announced to it in IHAVE, at once, to every peer (claims
  copies it does not have, so peers skip sending them), and it forwards no message.
Every drop is logged as drop_rpc with reason "attack: <behaviour>".
"""
from __future__ import annotations

import random
from collections import deque
from typing import Any, Callable

from node.framing import MAX_FRAME
from node.protocols.base import ProtocolCore, ProtocolIO
from node.protocols.pubsub import wire

Later = Callable[[float, Callable[[], None]], Any]  # run a callback after a delay (loop.call_later)

FORWARDING = ("topic-drop", "eclipse", "slow", "censor")
TRAFFIC = ("malformed", "publish-flood")
CONTROL = ("ihave-spam", "iwant-spam", "graft-spam", "idontwant-liar")
BEHAVIOURS = FORWARDING + TRAFFIC + CONTROL
OVERSIZED_EVERY = 50


class BehaviourIO:
    """A ProtocolIO that forwards everything to `inner` except what the behaviour changes."""

    def __init__(self, inner: ProtocolIO, settings: dict[str, Any], frame_topics: Callable[[bytes], set[str]],
                 later: Later):
        self.inner = inner
        self.behaviour = settings["behaviour"]
        self.settings = settings
        self.frame_topics = frame_topics
        self.later = later
        self.colluders = set(settings.get("colluders", ()))
        self.forwards = self.behaviour not in ("censor", "idontwant-liar")

    def send(self, peer: str, payload: bytes, priority: bool = False) -> None:
        topics = self.frame_topics(payload)
        if topics and (not self.forwards
                       or (self.behaviour == "topic-drop" and self.settings["topic"] in topics)):
            self.inner.trace("drop_rpc", peer=peer, bytes=len(payload), reason=f"attack: {self.behaviour}")
            return
        if topics and self.behaviour == "slow":
            self.later(self.settings["delay"], lambda: self.inner.send(peer, payload, priority))
            return
        self.inner.send(peer, payload, priority)

    def disconnect(self, peer: str) -> None:
        if self.behaviour == "eclipse" and peer in self.colluders:
            return
        self.inner.disconnect(peer)

    def __getattr__(self, name: str) -> Any:  # connect, timers, deliver, trace, peer_ip, ...
        return getattr(self.inner, name)


class AttackerCore:
    """The attacker's core: the honest core behind a proxy that sees its inputs first and, for
    traffic and control attacks, sends the attack on a timer. Everything else is the core's."""

    def __init__(self, core: ProtocolCore, io: BehaviourIO, rng: random.Random):
        self.core = core
        self.io = io
        self.rng = rng
        self.settings = io.settings
        self.behaviour = io.behaviour
        self.peers: set[str] = set()
        self.seen_ids: deque[bytes] = deque(maxlen=max(1, int(self.settings.get("ids", 500))))
        self.ticks = 0

    def __getattr__(self, name: str) -> Any:  # publish, subscribe, status, topics, mesh, ...
        return getattr(self.core, name)

    # inputs ----------------------------------------------------------------------------------
    def on_start(self) -> None:
        self.core.on_start()
        if self.behaviour in TRAFFIC + CONTROL and self.behaviour != "idontwant-liar":
            self.io.later(self._period(), self._tick)

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        self.peers.add(peer)
        self.core.on_peer_up(peer, outbound)

    def on_peer_down(self, peer: str) -> None:
        self.peers.discard(peer)
        self.core.on_peer_down(peer)

    def on_frame(self, peer: str, payload: bytes) -> None:
        if self.behaviour in CONTROL:
            self._learn(payload)
        self.core.on_frame(peer, payload)

    def on_timer(self, name: str, data: Any = None) -> None:
        self.core.on_timer(name, data)

    # the attacks -----------------------------------------------------------------------------
    def _period(self) -> float:
        return 1.0 / float(self.settings.get("rate", 10.0))

    def _learn(self, payload: bytes) -> None:
        """Remember message ids (iwant-spam asks for them); the liar disowns announced ones at once."""
        try:
            rpc = wire.decode_rpc(payload)
        except Exception:  # noqa: BLE001 - whatever a peer sent, an attacker does not crash on it
            return
        announced = [i for h in rpc.control.ihave for i in h.messageIDs]
        self.seen_ids.extend(announced)
        ids = getattr(self.core, "ids", None)  # GossipSub's message ids (node/protocols/pubsub/messages.py)
        self.seen_ids.extend(ids.wire_id(m) if ids else wire.default_msg_id(m).encode() for m in rpc.publish)
        if self.behaviour == "idontwant-liar" and announced:
            lie = wire.RPC()
            lie.control.idontwant.add().messageIDs.extend(announced)
            frame = wire.encode_rpc(lie)
            for peer in sorted(self.peers):
                self.io.inner.send(peer, frame, True)

    def _tick(self) -> None:
        self.ticks += 1
        if self.behaviour == "publish-flood":
            topics = sorted(getattr(self.core, "topics", ()) or ())
            if topics:
                self.core.publish(self.rng.choice(topics), self.rng.randbytes(int(self.settings.get("size", 1024))))
        else:
            for peer in sorted(self.peers):
                self.io.inner.send(peer, self._attack_frame())
        self.io.later(self._period(), self._tick)

    def _attack_frame(self) -> bytes:
        ids = int(self.settings.get("ids", 500))
        if self.behaviour == "malformed":
            return malformed_frame(self.rng, self.ticks)
        rpc = wire.RPC()
        topics = sorted(getattr(self.core, "topics", ()) or ()) or ["t0"]
        if self.behaviour == "ihave-spam":
            for topic in topics:
                rpc.control.ihave.add(topicID=topic, messageIDs=[self.rng.randbytes(20).hex().encode()
                                                                 for _ in range(ids)])
        elif self.behaviour == "iwant-spam":
            rpc.control.iwant.add().messageIDs.extend(list(self.seen_ids)[-ids:] or [b"none"])
        elif self.behaviour == "graft-spam":
            for topic in topics:
                rpc.control.graft.add(topicID=topic)
        return wire.encode_rpc(rpc)


def malformed_frame(rng: random.Random, n: int, max_frame: int = MAX_FRAME) -> bytes:
    """The n-th malformed payload: random bytes, a truncated RPC, or protobuf whose length fields lie;
    every OVERSIZED_EVERY-th one is longer than the transport accepts."""
    if n % OVERSIZED_EVERY == 0:
        return bytes(max_frame + 1)
    kind = n % 3
    if kind == 0:
        return rng.randbytes(rng.randint(1, 2048))
    real = wire.RPC()
    real.publish.add(topic="t0", data=rng.randbytes(64), seqno=rng.randbytes(8), **{"from": b"x"})
    encoded = wire.encode_rpc(real)
    if kind == 1:
        return encoded[:rng.randint(1, len(encoded) - 1)]
    # field 2 (publish), length-delimited, claiming far more bytes than follow
    return bytes([0x12, 0xFF, 0xFF, 0xFF, 0x0F]) + encoded


def build(core_cls: type[ProtocolCore], node_id: str, params: Any, io: ProtocolIO, clock: Callable[[], float],
          rng: random.Random, settings: dict[str, Any], later: Later) -> Any:
    """The core a node runs: `core_cls` itself for honest nodes (empty `settings`), else wrapped in
    its behaviour."""
    if not settings:
        return core_cls(node_id, params, io, clock, rng)
    bio = BehaviourIO(io, settings, core_cls.frame_topics, later)
    core = core_cls(node_id, params, bio, clock, rng)
    if settings["behaviour"] in FORWARDING:
        return core
    return AttackerCore(core, bio, random.Random(f"attack:{node_id}:{rng.random()}"))
