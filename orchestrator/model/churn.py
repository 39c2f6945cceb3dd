"""Churn: the scenario's `churn:` block turned into up/down transitions per node (pure, seeded).

Two sources, one output (a time-sorted list of `Transition`s that the planner turns into fault
events): a session model (a fraction of the nodes alternate between sessions and downtimes drawn
from exponential, Pareto or Weibull distributions with the given means) or a trace file of
`seconds_after_T0,node,up|down` lines. Either gives at most limits.MAX_TIMELINE_EVENTS transitions
(the scenario's validation refuses a session model expected to give more; these stop one that does).
"""
from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from node import ids

from . import data_files, limits
from .sections import Churn, Lifetime

DEFAULT_SHAPE = {"pareto": 2.0, "weibull": 0.5}


@dataclass(frozen=True)
class Transition:
    at: float
    node: str
    up: bool


class ChurnError(ValueError):
    """The churn block cannot be planned; the message names the field."""


def draw(life: Lifetime, rng: random.Random) -> float:
    """One duration from `life`, a distribution parameterised by its mean."""
    shape = life.shape or DEFAULT_SHAPE.get(life.distribution)
    if life.distribution == "exponential":
        return rng.expovariate(1 / life.mean)
    if life.distribution == "pareto":  # scale x_m so that the mean a x_m / (a - 1) is `mean`
        return life.mean * (shape - 1) / shape * rng.paretovariate(shape)
    return rng.weibullvariate(life.mean / math.gamma(1 + 1 / shape), shape)


def session_model(churn: Churn, rng: random.Random, present: list[str], reserve: list[str],
                  until: float, end: float) -> list[Transition]:
    """Each cycling node is up at T0, leaves after a session, and after a downtime comes back
    (rejoin same) or is replaced by the next reserve node (rejoin new), which then cycles too.
    Departures happen in [start, until); returns happen before `end`."""
    downtime = churn.downtime or Lifetime(distribution="exponential", mean=churn.session.mean)
    cycling = sorted(rng.sample(present, max(1, round(churn.fraction * len(present)))), key=_index)
    spare = list(reserve)
    out: list[Transition] = []
    # (time the node's current session started, node): processed in time order so that reserve nodes
    # are handed out in the order they are needed
    arrivals = 0
    active = [(churn.start, _index(n), n) for n in cycling]  # earliest first, then by node index
    heapq.heapify(active)
    while active:
        began, _, node = heapq.heappop(active)
        if len(out) >= limits.MAX_TIMELINE_EVENTS:
            raise ChurnError(f"churn.session: the sessions drawn give more than {limits.MAX_TIMELINE_EVENTS:,} "
                             "departures and returns; lengthen the sessions or downtimes, or lower churn.fraction")
        leave = began + draw(churn.session, rng)
        if leave >= until:
            continue
        out.append(Transition(round(leave, 6), node, False))
        back = leave + draw(downtime, rng)
        if back >= end:
            continue
        if churn.rejoin == "new":
            arrivals += 1
            if not spare:
                continue  # counted, to say how large the reserve must be
            node = spare.pop(0)
        out.append(Transition(round(back, 6), node, True))
        heapq.heappush(active, (back, _index(node), node))
    if arrivals > len(reserve):
        raise ChurnError(f"churn.reserve: this model brings {arrivals} new identities but the reserve holds "
                         f"{len(reserve)}; raise churn.reserve (and nodes.count), or lower churn.fraction")
    return sorted(out, key=lambda t: (t.at, _index(t.node)))


def read_trace(path: str, node_ids: set[str], end: float) -> list[Transition]:
    """Parse a churn trace (a path the scenario's validation resolved: orchestrator/model/data_files.py);
    errors name the line and field, never the file's text. Times are seconds after T0, within the run."""
    try:
        text = data_files.read_text(path)
    except (OSError, ValueError) as err:
        raise ChurnError(f"churn.trace: {path}: {getattr(err, 'strerror', None) or err}") from None
    out: list[Transition] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.lower().startswith("time"):
            continue  # blank, comment or header
        parts = [p.strip() for p in line.split(",")]
        where = f"churn.trace: {path} line {number}"
        if len(parts) != 3:
            raise ChurnError(f"{where}: expected `seconds,node,up|down`, found {len(parts)} fields")
        try:
            at = float(parts[0])
        except ValueError:
            raise ChurnError(f"{where}, field 1: not a number of seconds") from None
        if not 0 <= at < end:
            raise ChurnError(f"{where}: time {at:g}s is outside the run (0..{end:g}s after T0)")
        if parts[1] not in node_ids:
            raise ChurnError(f"{where}, field 2: not a node of this scenario (n0 ... n{len(node_ids) - 1})")
        if parts[2] not in ("up", "down"):
            raise ChurnError(f"{where}, field 3: the event is `up` or `down`")
        out.append(Transition(at, parts[1], parts[2] == "up"))
        if len(out) > limits.MAX_TIMELINE_EVENTS:
            raise ChurnError(f"churn.trace: {path}: more than {limits.MAX_TIMELINE_EVENTS:,} events; a run's fault "
                             "timeline holds at most that many")
    out.sort(key=lambda t: (t.at, _index(t.node)))
    state: dict[str, bool] = {}
    for t in out:
        if state.get(t.node) == t.up:
            raise ChurnError(f"churn.trace: {path}: {t.node} goes {'up' if t.up else 'down'} at {t.at:g}s "
                             "but already is")
        state[t.node] = t.up
    return out


def _index(node: str) -> int:
    return ids.node_index(node)
