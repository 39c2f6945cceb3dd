"""The fault timeline of a plan: the scenario's `faults:` and its churn (a session model or a trace)
turned into time-ordered FaultEvents, with the nodes that join later. Executed by the rules of
orchestrator/fault_rules.py, live or simulated."""
from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, Field

from node import ids

from . import churn as churn_model
from .scenario import Scenario, ScenarioError


class FaultEvent(BaseModel):
    """One executed step of the fault timeline: a node action, or a network-wide partition/heal."""

    at: float
    action: Literal["kill", "stop", "restart", "join", "degrade", "restore", "partition", "heal"]
    node: str = Field("", description="the node acted on; empty for partition and heal")
    groups: list[list[str]] = Field(default_factory=list, description="partition: every side, all nodes")
    delay_ms: float = Field(0.0, description="degrade: latency added to the node's links")
    loss: float = Field(0.0, description="degrade: frame loss on the node's links")
    bandwidth: int = Field(0, description="degrade: the node's upload and download rate (0: unchanged)")
    source: Literal["faults", "churn"] = "faults"


def in_order(e: FaultEvent) -> tuple[float, int, int]:
    """Timeline order; same-time events: network-wide first, then by node index."""
    return (e.at, 0, 0) if not e.node else (e.at, 1, ids.node_index(e.node))


def planned_faults(sc: Scenario, frng: random.Random, n: int) -> tuple[list[FaultEvent], dict[str, float]]:
    """The scenario's `faults:` (and a churn trace) as timeline events; the nodes that join later."""
    everyone = [f"n{i}" for i in range(n)]
    out: list[FaultEvent] = []
    for f in sc.faults:
        targets = f.nodes or ([f"n{i}" for i in sorted(frng.sample(range(n), f.sample))] if f.sample else [])
        if f.action == "partition":
            if f.groups is not None:  # (an empty list: one side, refused below)
                listed = {x for g in f.groups for x in g}
                sides = [ids.by_index(g) for g in f.groups if g]
                rest = [x for x in everyone if x not in listed]
                sides += [rest] if rest else []
            else:
                cut = sorted(frng.sample(range(n), max(1, round(f.split * n))))
                sides = [[f"n{i}" for i in cut], [x for x in everyone if ids.node_index(x) not in cut]]
            if len(sides) < 2:
                raise ScenarioError(f"scenario {sc.name!r}", ["faults: a partition needs at least two sides"])
            out.append(FaultEvent(at=f.at, action="partition", groups=sides))
            if f.duration:
                out.append(FaultEvent(at=f.at + f.duration, action="heal"))
        elif f.action == "heal":
            out.append(FaultEvent(at=f.at, action="heal"))
        for node in targets:
            impair = {"delay_ms": (f.delay or 0) * 1000, "loss": f.loss or 0.0, "bandwidth": f.bandwidth or 0}
            out.append(FaultEvent(at=f.at, action=f.action, node=node,
                                  **(impair if f.action == "degrade" else {})))
            if f.restart_after:
                out.append(FaultEvent(at=f.at + f.restart_after, action="restart", node=node))
            if f.duration and f.action == "degrade":
                out.append(FaultEvent(at=f.at + f.duration, action="restore", node=node))
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
        if e.action == "join":
            if e.node in joins:
                raise ScenarioError(f"scenario {sc.name!r}", [f"faults: {e.node} joins twice (a join is a new "
                                                              "identity; use restart to bring it back)"])
            joins[e.node] = e.at
    return out, joins


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
