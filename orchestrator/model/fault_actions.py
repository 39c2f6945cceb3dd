"""The fault timeline's actions as one table, a row per action (`ACTIONS`): the scenario keys it
requires or allows, the event its optional key schedules after it (a kill's `restart_after`: a
restart; a partition's `duration`: a heal), the numbers it carries to its events, what it changes (a
node's process, or links), the executor method it calls and when that does not apply, and how the
fidelity rule times it. Whatever knows about fault actions reads them here: the scenario's `Fault`
(sections.py), the timeline (timeline.py), the limits (limits.py), the executors' rules
(orchestrator/faults/rules.py), the fidelity rule (orchestrator/fidelity/rule.py), the live runner's watch on nodes that exit
(orchestrator/run/runner.py: `leaves_node`, `instant`) and `peerlab plan`
(orchestrator/cli/scenario.py). A new action is a row here and its effect in the two executors
(docs/extending.md, "Adding a fault").

May import: orchestrator.model.units (the quantities' types); nothing else of peerlab."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Literal, Protocol

from .units import Bandwidth, Duration


@dataclass(frozen=True)
class Quantity:
    """A number an action carries from the scenario (the fault's `key`, in the scenario's units, > 0) to
    its timeline events (`event`, in the executors' units: `scale` times the key's; 0 when not given)."""

    key: str
    type: Any                                  # the scenario's type (orchestrator/model/units.py)
    doc: str
    event: str
    kind: Literal["latency", "share", "rate"]  # time dilation: times k, as is, divided by k (faults/next_shapes.py)
    shown: str                                 # as `peerlab plan` prints it (a rate in Mbit/s)
    scale: float = 1
    below: float | None = None                 # the scenario's exclusive upper bound (a share's 1)

    @property
    def event_type(self) -> type:
        return int if self.kind == "rate" else float

    def show(self, value: float) -> str:
        return self.shown.format(value / 1e6 if self.kind == "rate" else value)


@dataclass(frozen=True)
class Fields:
    """Keys of a fault that go together, and how an action that requires them wants them (exactly one,
    at least one); `optional` keys only an action's `after` allows. An action that neither requires nor
    allows them refuses them, naming the actions they belong on (or with `elsewhere`, {action} filled)."""

    keys: tuple[str, ...]
    rule: Literal["exactly one", "at least one", "optional"] = "optional"
    hint: str = ""                       # how `give ...` names them (default: the keys)
    events: tuple[str, ...] = ()         # the event fields they become, passed to the executor in order
    quantities: tuple[Quantity, ...] = ()
    elsewhere: str = ""

    @classmethod
    def carrying(cls, *quantities: Quantity) -> Fields:
        """Quantities of which an action needs at least one."""
        return cls(tuple(q.key for q in quantities), "at least one", events=tuple(q.event for q in quantities),
                   quantities=quantities)


@dataclass(frozen=True)
class After:
    """An optional key whose duration schedules `action` on the same target that long after."""

    key: str
    action: str


@dataclass(frozen=True)
class FaultAction:
    """One action of the fault timeline: a row of ACTIONS."""

    name: str
    requires: tuple[Fields, ...]              # TARGET: one event per node acted on; else one for the network
    method: str                               # the FaultExecutor's, called with the event's `args`
    changes: Literal["process", "links"]      # a node's process, or links (a node's, or across the network)
    lateness: Literal["issued", "took effect"]  # the fidelity rule's: from the planned time to then
    doc: str = ""                             # beside its name in the scenario's reference
    after: After | None = None
    only_if: Literal["running", "down", "degraded"] | None = None  # else skipped: the node is not so
    leaves_node: Literal["down", "up"] | None = None  # a node action's: its process ended, or running
    instant: bool = False                     # in effect once issued (a SIGKILL), else once done
    new_identity: bool = False                # its node is absent until it (a join)

    @property
    def on_nodes(self) -> bool:
        return TARGET in self.requires

    @property
    def args(self) -> tuple[str, ...]:
        return tuple(e for g in self.requires for e in g.events)

    @property
    def quantities(self) -> tuple[Quantity, ...]:
        return tuple(q for g in self.requires for q in g.quantities)

    def allows(self, fields: Fields) -> bool:
        return fields in self.requires or (self.after is not None and self.after.key in fields.keys)


DELAY = Quantity("delay", Duration, "latency added to each of the node's links, both directions", "delay_ms",
                 "latency", "+{:g} ms", scale=1000)
LOSS = Quantity("loss", float, "frame loss on the node's links, both directions", "loss", "share", "loss {:g}",
                below=1)
BANDWIDTH = Quantity("bandwidth", Bandwidth, "the node's new upload and download rate", "bandwidth", "rate",
                     "{:g} Mbit/s")
JITTER = Quantity("jitter", Duration, "latency variation (uniform, +-) added to each of the node's links, both "
                  "directions", "jitter_ms", "latency", "jitter {:g} ms", scale=1000)

TARGET = Fields(("nodes", "sample"), "exactly one", "nodes (a list of ids) or sample (a count)", events=("node",),
                elsewhere="{action} applies to the whole network: leave nodes and sample out")
RESTART_AFTER = Fields(("restart_after",))
SIDES = Fields(("groups", "split"), "exactly one", "groups (lists of node ids) or split (a fraction)",
               events=("groups",))
DURATION = Fields(("duration",))
IMPAIRMENT = Fields.carrying(DELAY, LOSS, BANDWIDTH)
JITTERING = Fields.carrying(JITTER)
GROUPS = (TARGET, RESTART_AFTER, SIDES, DURATION, IMPAIRMENT, JITTERING)  # in the order `Fault` declares and checks them
QUANTITIES = tuple(q for g in GROUPS for q in g.quantities)

PROCESS, LINKS = "process", "links"
ISSUED, TOOK_EFFECT = "issued", "took effect"
ACTIONS = {a.name: a for a in (
    #           name         requires              method       changes  lateness
    FaultAction("kill",      (TARGET,),            "kill",      PROCESS, ISSUED,      doc="SIGKILL",
                after=After("restart_after", "restart"), only_if="running", leaves_node="down", instant=True),
    FaultAction("stop",      (TARGET,),            "stop",      PROCESS, ISSUED,      doc="graceful",
                after=After("restart_after", "restart"), only_if="running", leaves_node="down"),
    FaultAction("restart",   (TARGET,),            "start",     PROCESS, ISSUED,      doc="same identity",
                only_if="down", leaves_node="up"),
    FaultAction("join",      (TARGET,),            "start",     PROCESS, ISSUED,
                doc="a node absent until now: a new identity", only_if="down", leaves_node="up", new_identity=True),
    FaultAction("partition", (SIDES,),             "partition", LINKS,   TOOK_EFFECT, after=After("duration", "heal")),
    FaultAction("heal",      (),                   "heal",      LINKS,   TOOK_EFFECT),
    FaultAction("degrade",   (TARGET, IMPAIRMENT), "degrade",   LINKS,   TOOK_EFFECT,
                after=After("duration", "restore")),
    FaultAction("jitter",    (TARGET, JITTERING),  "jitter",    LINKS,   TOOK_EFFECT,
                after=After("duration", "restore")),
    FaultAction("restore",   (TARGET,),            "restore",   LINKS,   TOOK_EFFECT, only_if="degraded"),
)}
NAMES = tuple(ACTIONS)
LINK_METHODS = frozenset(a.method for a in ACTIONS.values() if a.changes == LINKS)  # the link faults' (next_shapes.py)


class FaultExecutor(Protocol):
    """The rows' methods, given the event's `args`: the live run's (orchestrator/faults/live_run.py)
    are coroutines, the simulator's (orchestrator/sim/engine.py) plain calls."""

    def kill(self, node: str) -> Any: ...              # SIGKILL: the process vanishes, logs nothing more
    def stop(self, node: str) -> Any: ...              # graceful: the node logs its stop, then exits
    def start(self, node: str) -> Any: ...             # restart (same identity) or join (absent until now)
    def partition(self, groups: list[list[str]]) -> Any: ...
    def heal(self) -> Any: ...
    def degrade(self, node: str, delay_ms: float, loss: float, bandwidth: int | None) -> Any: ...
    def jitter(self, node: str, jitter_ms: float) -> Any: ...
    def restore(self, node: str) -> Any: ...


def either(words: Iterable[str], last: str = "or") -> str:
    """`a`, `a or b`, `a, b or c`."""
    words = list(words)
    return ", ".join(words[:-1]) + f" {last} " + words[-1] if len(words) > 1 else "".join(words)


def owners(key: str) -> list[FaultAction]:
    """The actions that take `key` (require it, or schedule their `after` with it)."""
    return [a for a in ACTIONS.values() if any(key in g.keys and a.allows(g) for g in GROUPS)]


def key_doc(key: str, doc: str) -> str:
    """A key's description in the scenario reference, with the actions it belongs on: `partition: ...`."""
    return "/".join(a.name for a in owners(key)) + ": " + doc


def after_doc(key: str) -> str:
    """An `after` key's description: `kill/stop: restart this long after`, or, when what it schedules
    differs, `partition: heal, degrade: restore, this long after`."""
    takers = owners(key)
    then = {a.after.action for a in takers if a.after}
    if len(then) == 1:
        return "/".join(a.name for a in takers) + f": {then.pop()} this long after"
    return ", ".join(f"{a.name}: {a.after.action}" for a in takers if a.after) + ", this long after"


def action_doc() -> str:
    """`action`'s description: every action, with its doc."""
    return ", ".join(f"{a.name} ({a.doc})" if a.doc else a.name for a in ACTIONS.values())


def complaint(action: str, given: Collection[str]) -> str | None:
    """What is wrong with a fault of `action` whose keys `given` are set (None: nothing), naming the key
    and the fix; the first of Fault's keys in their order that is wrong."""
    row = ACTIONS.get(action)
    if row is None:
        return f"unknown fault action {action!r}; known: {', '.join(NAMES)}"
    for g in GROUPS:
        present = [k for k in g.keys if k in given]
        if g in row.requires:
            if g.rule == "exactly one" and len(present) != 1:
                return f"{action}: give exactly one of {g.hint or either(g.keys)}"
            if g.rule == "at least one" and not present:
                return f"{action}: give {'at least one of ' if len(g.keys) > 1 else ''}{g.hint or ', '.join(g.keys)}"
        elif present and not row.allows(g):
            return g.elsewhere.format(action=action) if g.elsewhere else _belongs(g)
    return None


def _belongs(g: Fields) -> str:
    takers = [a for a in ACTIONS.values() if a.allows(g)]
    differ = g.rule == "optional" and len({a.after.action for a in takers if a.after}) > 1
    where = either(f"{a.name} ({a.after.action} after)" if differ and a.after else a.name for a in takers)
    return f"{either(g.keys, 'and')} {'belong' if len(g.keys) > 1 else 'belongs'} on {where}"


def _check() -> None:
    """The table holds together (at import): `after` names an action and an optional key, every method
    is the executor's, every key is in GROUPS once."""
    keys = [k for g in GROUPS for k in g.keys]
    optional = {k for g in GROUPS if g.rule == "optional" for k in g.keys}
    for a in ACTIONS.values():
        if a.after and (a.after.action not in ACTIONS or a.after.key not in optional):
            raise TypeError(f"fault action {a.name}: after {a.after} names no action or optional key")
        if not callable(getattr(FaultExecutor, a.method, None)):
            raise TypeError(f"fault action {a.name}: FaultExecutor has no method {a.method}")
    if len(keys) != len(set(keys)):
        raise TypeError(f"fault keys in more than one group: {keys}")


_check()
