"""Attack behaviours that wrap any protocol core: the core runs unchanged, and a `BehaviourIO`
standing between it and the real ProtocolIO edits what it sends (seed: shared/seeds/topiary.txt,
section V-D; scenario `attackers:`).

- topic-drop: subscribed to the victim topic (the planner adds it) but never forwards its messages.
- censor: forwards no message at all (control frames and subscriptions still go out, so it looks alive).
- slow: every frame carrying a message leaves `delay` seconds late (a node with slow processing).
- eclipse: forwards honestly; colluders are fully connected and court honest nodes (planned edges),
  and it never drops a link to a fellow colluder, whatever its core decides.

What a frame carries is read with the core's `frame_topics`; a frame mixing the victim topic with
others is dropped whole. Every drop is logged as drop_rpc with reason "attack: <behaviour>".
"""
from __future__ import annotations

from typing import Any, Callable

from node.protocols.base import ProtocolIO

Later = Callable[[float, Callable[[], None]], Any]  # run a callback after a delay (loop.call_later)


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

    def send(self, peer: str, payload: bytes, priority: bool = False) -> None:
        topics = self.frame_topics(payload)
        if topics and (self.behaviour == "censor"
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


def wrap(io: ProtocolIO, settings: dict[str, Any], frame_topics: Callable[[bytes], set[str]],
         later: Later) -> ProtocolIO:
    """The io a core should be given: `io` itself for honest nodes."""
    return BehaviourIO(io, settings, frame_topics, later) if settings else io
