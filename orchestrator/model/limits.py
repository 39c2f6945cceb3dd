"""How much a scenario may ask the planner to generate, counted from the scenario before anything is
generated: fault-timeline events (the faults' and the churn model's), subscription draws, and the
combinations of a matrix. A scenario past a limit is refused naming the field and the limit, so that
`validate` refuses what `plan` could not finish (a churn session of 1 ns, a million topics per node)
and `plan` never starts it. The workload's publishes are bounded in traffic.py (MAX_PUBLISHES).
May import: orchestrator.model.units, orchestrator.model.fault_actions; nothing else of peerlab.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .fault_actions import ACTIONS, SIDES, either
from .units import format_duration

MAX_TIMELINE_EVENTS = 100_000      # fault-timeline events of one run (faults and churn together)
MAX_SUBSCRIPTION_DRAWS = 5_000_000  # nodes x topics drawn for (interest, zipf)
MAX_SUBSCRIPTIONS = 1_000_000      # nodes x topics per node (zipf)
MAX_ZIPF_WORK = 200_000_000        # nodes x size x topics: a steep zipf samples the rare topics one by one
MAX_COMBINATIONS = 100             # of a matrix: each is a run
MAX_MATRIX_WORK = 2_000_000        # combinations x values of the scenario: each combination is validated


def churn_events(sc: Any) -> float:
    """About how many departures and returns the churn session model draws (0 without one): each
    cycling node leaves and comes back once per session plus downtime, over its window."""
    churn, wl = sc.churn, sc.workload
    if churn is None or churn.fraction is None or churn.session is None:
        return 0.0
    cycling = max(1, round(churn.fraction * max(1, sc.nodes.count - churn.reserve)))
    until = churn.until if churn.until is not None else wl.warmup + wl.duration
    cycle = churn.session.mean + (churn.downtime.mean if churn.downtime else churn.session.mean)
    return 2 * cycling * (max(0.0, until - churn.start) / cycle + 1)


# of the message below: what a node's fault schedules after it (its restart or restore), what lists every node
_UNDONE_BY = either(dict.fromkeys(a.after.action for a in ACTIONS.values() if a.after and a.on_nodes))
_LISTS_ALL = either(a.name for a in ACTIONS.values() if SIDES in a.requires)


def fault_events(sc: Any) -> float:
    """The events the scenario's `faults:` become: one per node acted on (one with the sides lists every
    node), twice with what its `after` key schedules (orchestrator/model/fault_actions.py)."""
    n, events = sc.nodes.count, 0.0
    for f in sc.faults:
        row = ACTIONS[f.action]
        targets = n if SIDES in row.requires else len(f.nodes or []) or f.sample or 1
        events += targets * (2 if row.after and getattr(f, row.after.key) else 1)
    return events


def check(sc: Any) -> None:
    """ValueError naming the field, for a scenario whose plan would pass a limit above."""
    churn = churn_events(sc)
    if churn > MAX_TIMELINE_EVENTS:
        c = sc.churn
        downtime = c.downtime.mean if c.downtime else c.session.mean
        raise ValueError(f"churn.session.mean: sessions of {format_duration(c.session.mean)} and downtimes of "
                         f"{format_duration(downtime)} give about {_count(churn)} departures and returns; a run's "
                         f"fault timeline holds at most {MAX_TIMELINE_EVENTS:,}: lengthen the sessions or "
                         "downtimes, shorten churn.until, or lower churn.fraction")
    faults = fault_events(sc)
    if faults + churn > MAX_TIMELINE_EVENTS:
        raise ValueError(f"faults: {_count(faults)} fault-timeline events (each node a fault acts on, and its "
                         f"{_UNDONE_BY}; a {_LISTS_ALL} lists every node)"
                         f"{f' beside {_count(churn)} of churn' if churn else ''}"
                         f"; a run's timeline holds at most {MAX_TIMELINE_EVENTS:,}")
    _subscriptions(sc)


def _subscriptions(sc: Any) -> None:
    subs, n, topics = sc.topics.subscriptions, sc.nodes.count, sc.topics.count
    model = getattr(subs, "model", None)
    if model in ("interest", "zipf") and n * topics > MAX_SUBSCRIPTION_DRAWS:
        raise ValueError(f"topics.count: {n:,} nodes each drawing from {topics:,} topics is {_count(n * topics)} "
                         f"draws; at most {MAX_SUBSCRIPTION_DRAWS:,} (fewer topics or nodes)")
    if model == "zipf" and n * subs.size > MAX_SUBSCRIPTIONS:
        raise ValueError(f"topics.subscriptions.size: {n:,} nodes x {subs.size:,} topics each is "
                         f"{_count(n * subs.size)} subscriptions; at most {MAX_SUBSCRIPTIONS:,}")
    if model == "zipf" and n * subs.size * topics > MAX_ZIPF_WORK:
        raise ValueError(f"topics.subscriptions.size: {n:,} nodes drawing {subs.size:,} of {topics:,} topics each "
                         f"by weight is too much sampling (nodes x size x topics at most {MAX_ZIPF_WORK:,})")


def check_matrix(sizes: dict[str, int], values: Callable[[], int]) -> None:
    """ValueError naming the limit, for a matrix (path -> how many values) of more than MAX_COMBINATIONS
    combinations, or whose combinations of a scenario of `values()` values are too many to validate.
    Counted before any combination is built."""
    total = 1
    for size in sizes.values():
        total = min(total * size, 10**18)
    if total > MAX_COMBINATIONS:
        shown = " x ".join(f"{size:,}" for size in list(sizes.values())[:8]) + (" x ..." if len(sizes) > 8 else "")
        raise ValueError(f"matrix: {shown} values give {_count(total)} combinations; at most {MAX_COMBINATIONS} "
                         "(each is a run): pin paths with --set PATH=VALUE, or split the matrix")
    if total > 1 and total * (count := values()) > MAX_MATRIX_WORK:
        raise ValueError(f"matrix: {total} combinations of a scenario of {count:,} values are too many to check "
                         f"(combinations x values at most {MAX_MATRIX_WORK:,}); split the matrix")


def _count(x: float) -> str:
    return f"{x:,.0f}" if x < 1e15 else "more than 10^15" if math.isfinite(x) else "unboundedly many"
