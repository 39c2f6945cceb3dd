"""The fault timeline's rules, shared by the live runner (orchestrator/run/runner.py) and the
simulator (orchestrator/sim/engine.py): which executor method a planned fault calls, given what is
running, and when it does not apply, as the action's row in orchestrator/model/fault_actions.py says.
Each executor implements the methods (`FaultExecutor`) on its own world (processes and tc trees, or
the discrete-event network); the decisions are made here once.
May import: orchestrator.model (the plan's FaultEvent, the table); nothing of run/ or sim/."""
from __future__ import annotations

from typing import Any, Callable, Container

from orchestrator.model.fault_actions import ACTIONS, NAMES, FaultExecutor
from orchestrator.model.plan import FaultEvent


class Skipped(str):
    """Why a planned fault does not apply, as the run warns it."""


def step(fault: FaultEvent, executor: FaultExecutor, is_up: Callable[[str], bool],
         degraded: Container[str]) -> Any:
    """Call the executor's method for `fault` with the arguments its row names, and return what the
    call returns (the live run's methods are coroutines: one not yet started, for the runner to await;
    the simulator's are done), or `Skipped`, why it does not apply (its row's `only_if`: a kill or stop
    of a node that is down, a restart or join of one that is running, a restore of a link not
    degraded)."""
    row = ACTIONS.get(fault.action)
    if row is None:
        raise ValueError(f"unknown fault action {fault.action!r}; known: {', '.join(NAMES)}")
    unmet = _unmet(row.only_if, fault.node, is_up, degraded)
    if unmet:
        return Skipped(f"{fault.action} of {fault.node} at {fault.at:g}s: {unmet}; skipped")
    return getattr(executor, row.method)(*(getattr(fault, arg) for arg in row.args))


def _unmet(only_if: str | None, node: str, is_up: Callable[[str], bool], degraded: Container[str]) -> str:
    """Why a row's condition does not hold for `node` ("": it holds, or there is none)."""
    if only_if == "running" and not is_up(node):
        return "it is not running"
    if only_if == "down" and is_up(node):
        return "it is still running"
    if only_if == "degraded" and node not in degraded:
        return "its links are not degraded"
    return ""


def record(fault: FaultEvent, t_ns: int, t0_ns: int, digits: int = 6,
           issued_ns: int | None = None) -> dict[str, Any]:
    """The manifest's entry for an executed fault (faults_executed): when it took effect (`t_ns`) and
    when its execution began (`issued_ns`). A partition or heal changes links one by one in between:
    a partition holds from its `t_ns`, and lasts until its heal's `issued_ns`."""
    return {**fault.model_dump(exclude_defaults=True), "at": fault.at, "action": fault.action, "t_ns": t_ns,
            "issued_ns": t_ns if issued_ns is None else issued_ns, "offset_s": round((t_ns - t0_ns) / 1e9, digits)}
