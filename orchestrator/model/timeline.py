"""The fault timeline of a plan: the scenario's `faults:` and its churn (a session model or a trace)
turned into time-ordered FaultEvents, with the nodes that join later; what each action carries and
schedules after it, as its row in fault_actions.py says. Executed by the rules of
orchestrator/faults/rules.py, live or simulated.
May import: the rest of orchestrator/model, node.ids; never orchestrator/run, sim or fidelity."""
from __future__ import annotations

import random
from typing import Literal

from pydantic import Field, create_model

from node import ids

from . import churn as churn_model
from .fault_actions import ACTIONS, NAMES, QUANTITIES, SIDES, either
from .scenario import Scenario, ScenarioError
from .sections import Fault

_NETWORK_WIDE = either((a.name for a in ACTIONS.values() if not a.on_nodes), "and")
# the quantities an action carries (a degrade's delay_ms, loss, bandwidth) come from the table, before `source`
FaultEvent = create_model(
    "FaultEvent", __module__=__name__,
    __doc__="One executed step of the fault timeline: a node action, or a network-wide one (a partition).",
    at=(float, ...),
    action=(Literal[NAMES], ...),  # type: ignore[valid-type]
    node=(str, Field("", description=f"the node acted on; empty for {_NETWORK_WIDE}")),
    groups=(list[list[str]], Field(default_factory=list, description="/".join(
        a.name for a in ACTIONS.values() if SIDES in a.requires) + ": every side, all nodes")),
    **{q.event: (q.event_type, Field(q.event_type(), description=q.doc)) for q in QUANTITIES},
    source=(Literal["faults", "churn"], "faults"))


def in_order(e: FaultEvent) -> tuple[float, int, int]:
    """Timeline order; same-time events: network-wide first, then by node index."""
    return (e.at, 0, 0) if not e.node else (e.at, 1, ids.node_index(e.node))


def planned_faults(sc: Scenario, frng: random.Random, n: int) -> tuple[list[FaultEvent], dict[str, float]]:
    """The scenario's `faults:` (and a churn trace) as timeline events; the nodes that join later."""
    everyone = [f"n{i}" for i in range(n)]
    out: list[FaultEvent] = []
    for f in sc.faults:
        row = ACTIONS[f.action]
        targets = (f.nodes or ([f"n{i}" for i in sorted(frng.sample(range(n), f.sample))] if f.sample else [])
                   if row.on_nodes else [""])
        carried = {q.event: getattr(f, q.key) * q.scale for q in row.quantities if getattr(f, q.key) is not None}
        if SIDES in row.requires:
            carried["groups"] = _sides(sc, f, frng, n)
        later = getattr(f, row.after.key) if row.after else None
        for node in targets:
            out.append(FaultEvent(at=f.at, action=f.action, node=node, **carried))
            if later:
                out.append(FaultEvent(at=f.at + later, action=row.after.action, node=node))
    if sc.churn and sc.churn.trace:
        try:
            trace = churn_model.read_trace(sc.churn.trace, set(everyone), sc.workload.warmup
                                           + sc.workload.duration + sc.workload.drain)
        except churn_model.ChurnError as err:
            raise ScenarioError(f"scenario {sc.name!r}", [str(err)]) from None
        seen: set[str] = set()
        for t in trace:
            action = ("restart" if t.node in seen else "join") if t.up else sc.churn.departure
            seen.add(t.node)
            out.append(FaultEvent(at=t.at, action=action, node=t.node, source="churn"))
    out.sort(key=in_order)
    joins: dict[str, float] = {}
    for e in out:
        if ACTIONS[e.action].new_identity:
            if e.node in joins:
                raise ScenarioError(f"scenario {sc.name!r}", [f"faults: {e.node} joins twice (a join is a new "
                                                              "identity; use restart to bring it back)"])
            joins[e.node] = e.at
    return out, joins


def _sides(sc: Scenario, f: Fault, frng: random.Random, n: int) -> list[list[str]]:
    """A partition's sides, every node in one: the groups listed and the rest, or a split drawn."""
    everyone = [f"n{i}" for i in range(n)]
    if f.groups is not None:  # (an empty list: one side, refused below)
        listed = {x for g in f.groups for x in g}
        sides = [ids.by_index(g) for g in f.groups if g]
        rest = [x for x in everyone if x not in listed]
        sides += [rest] if rest else []
    else:
        cut = sorted(frng.sample(range(n), max(1, round(f.split * n))))
        sides = [[f"n{i}" for i in cut], [x for x in everyone if ids.node_index(x) not in cut]]
    if len(sides) < 2:
        raise ScenarioError(f"scenario {sc.name!r}", [f"faults: a {f.action} needs at least two sides"])
    return sides


def churn_faults(sc: Scenario, rng: random.Random, present: list[str], reserve: list[str]) -> list[FaultEvent]:
    """The session model's departures and returns (reserve nodes join as new identities)."""
    churn, wl = sc.churn, sc.workload
    until = churn.until if churn.until is not None else wl.warmup + wl.duration
    try:
        moves = churn_model.session_model(churn, rng, present, reserve, until, wl.warmup + wl.duration + wl.drain)
    except churn_model.ChurnError as err:
        raise ScenarioError(f"scenario {sc.name!r}", [str(err)]) from None
    return [FaultEvent(at=t.at, node=t.node, source="churn",
                       action=("join" if t.node in reserve else "restart") if t.up else churn.departure)
            for t in moves]
