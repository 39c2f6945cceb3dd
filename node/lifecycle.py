"""One node's life, the same in every driver (the asyncio runtime, the simulator): announce itself,
start its core, author and subscribe, dial; at T0 arm its publish schedule and timed subscriptions;
publish; stop. A driver supplies the `NodeHost` (clock, timers, tracing, dialling) and the node's
slice of the plan; this module decides what happens and in which order, and logs the events the
analysis expects (start, behaviour, t0, stop) the same way everywhere."""
from __future__ import annotations

import random
from typing import Any, Callable, NamedTuple, Protocol, Sequence

from node.protocols.base import ProtocolCore


class NodeRandomness(NamedTuple):
    """A node process's random streams, drawn from the run's seed and the node's id alone, so the
    same seed gives every driver's core the same choices (its meshes, its gossip targets): the
    core's, the transport's (jitter and loss on its sends), and the lifecycle's (message payloads).
    A restarted process draws them afresh, as a new process does."""

    core: random.Random
    transport: random.Random
    life: random.Random

    @classmethod
    def of(cls, seed: int, node_id: str) -> NodeRandomness:
        life = random.Random(f"{seed}:{node_id}")
        core = random.Random(life.getrandbits(64))
        return cls(core, random.Random(life.getrandbits(64)), life)


class NodeSlice(Protocol):
    """What a node needs of the plan (node.config.NodeConfig and the planner's NodePlan both have it)."""

    protocol: str
    role: str
    authors: Sequence[str]
    subscriptions: Sequence[str]
    dial: Sequence[str]
    schedule: Sequence[tuple[float, str, int]]        # (offset from T0 s, topic, size)
    late_subscriptions: Sequence[tuple[float, str]]   # (offset from T0 s, topic)


class NodeHost(Protocol):
    """What a driver gives the lifecycle."""

    core: ProtocolCore

    def trace(self, type_: str, **fields: Any) -> None: ...

    def connect(self, peer: str) -> None: ...

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` (as a core input: guarded) at `when` on `clock()` (at once if past); a
        handle for cancel. Absolute, so a schedule armed late lands on the same instants."""

    def cancel(self, handle: Any) -> None: ...

    def guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one core input now (the runtime keeps a node alive through a core's exception)."""

    def clock(self) -> float:
        """Now, in seconds, on the clock T0 is given on (the wall clock, or virtual time)."""


class NodeLifecycle:
    def __init__(self, node_id: str, plan: NodeSlice, host: NodeHost, rng: random.Random):
        self.node_id = node_id
        self.plan = plan
        self.host = host
        self.rng = rng  # message payloads
        self.t0: float | None = None
        self.published = 0
        self.stopped = False
        self.on_publish: Callable[[str, str], None] | None = None  # (topic, msg id), for a simulation's record
        self._armed: list[Any] = []

    def announce(self) -> None:
        """The process is up: its first events, before the core starts."""
        self.host.trace("start", protocol=self.plan.protocol)
        self.host.trace("behaviour", behaviour=self.plan.role)

    def join(self) -> None:
        """The core has started: author its topics, subscribe, dial its planned peers."""
        core, guard = self.host.core, self.host.guard
        for topic in self.plan.authors:
            guard(core.create_topic, topic)
        for topic in self.plan.subscriptions:
            guard(core.subscribe, topic)
        for peer in self.plan.dial:
            self.host.connect(peer)

    def arm(self, t0_ns: int) -> int:
        """T0 (ns on the host's clock) is known: schedule the publishes still ahead (a restarted
        node skips what it missed) and the timed subscriptions (at once if their time has passed).
        Returns how many publishes were armed; a second call does nothing."""
        if self.t0 is not None:
            return 0
        self.t0 = t0 = t0_ns / 1e9
        self.host.trace("t0", t0=t0_ns)
        now = self.host.clock()
        armed = 0
        for offset, topic, size in self.plan.schedule:
            if t0 + offset >= now:
                self._armed.append(self.host.call_at(t0 + offset, self.publish, topic, size))
                armed += 1
        for offset, topic in self.plan.late_subscriptions:
            self._armed.append(self.host.call_at(max(now, t0 + offset), self.host.core.subscribe, topic))
        return armed

    def publish(self, topic: str, size: int) -> str:
        msg_id = self.host.core.publish(topic, self.rng.randbytes(size))
        self.published += 1
        if self.on_publish:
            self.on_publish(topic, msg_id)
        return msg_id

    def stop(self, reason: str) -> bool:
        """Log the stop (once) and forget what is armed; False if it had stopped already."""
        if self.stopped:
            return False
        self.stopped = True
        self.host.trace("stop", reason=reason)
        self.disarm()
        return True

    def disarm(self) -> None:
        """Cancel the armed schedule (the node stops, or crashes in a simulation)."""
        for handle in self._armed:
            self.host.cancel(handle)
        self._armed.clear()
