"""The fault timeline's rules, shared by the live runner (orchestrator/run/runner.py) and the
simulator (orchestrator/sim/engine.py): which action a planned fault becomes, given what is running,
and when it does not apply. Each executor implements the actions (`FaultExecutor`) on its own world
(processes and tc trees, or the discrete-event network); the decisions are made here once."""
from __future__ import annotations

from typing import Any, Callable, Container, Protocol

from orchestrator.model.plan import FaultEvent


class FaultExecutor(Protocol):
    """The actions; the live runner's are coroutines, the simulator's plain calls."""

    def kill(self, node: str) -> Any: ...              # SIGKILL: the process vanishes, logs nothing more
    def stop(self, node: str) -> Any: ...              # graceful: the node logs its stop, then exits
    def start(self, node: str) -> Any: ...             # restart (same identity) or join (absent until now)
    def partition(self, groups: list[list[str]]) -> Any: ...
    def heal(self) -> Any: ...
    def degrade(self, node: str, delay_ms: float, loss: float, bandwidth: int | None) -> Any: ...
    def restore(self, node: str) -> Any: ...


Step = tuple[Callable[..., Any], tuple[Any, ...]]


def step(fault: FaultEvent, executor: FaultExecutor, is_up: Callable[[str], bool],
         degraded: Container[str]) -> Step | str:
    """The executor's action and its arguments for `fault`, or why it does not apply (a kill or stop of
    a node that is down, a restart or join of one that is running, a restore of a link not degraded)."""
    node, action = fault.node, fault.action
    if action in ("kill", "stop"):
        if not is_up(node):
            return f"{action} of {node} at {fault.at:g}s: it is not running; skipped"
        return (executor.kill if action == "kill" else executor.stop), (node,)
    if action in ("restart", "join"):
        if is_up(node):
            return f"{action} of {node} at {fault.at:g}s: it is still running; skipped"
        return executor.start, (node,)
    if action == "partition":
        return executor.partition, (fault.groups,)
    if action == "heal":
        return executor.heal, ()
    if action == "degrade":
        return executor.degrade, (node, fault.delay_ms, fault.loss, fault.bandwidth)
    if action == "restore":
        if node not in degraded:
            return f"restore of {node} at {fault.at:g}s: its links are not degraded; skipped"
        return executor.restore, (node,)
    raise ValueError(f"unknown fault action {action!r}")


def record(fault: FaultEvent, t_ns: int, t0_ns: int, digits: int = 6,
           issued_ns: int | None = None) -> dict[str, Any]:
    """The manifest's entry for an executed fault (faults_executed): when it took effect (`t_ns`) and
    when its execution began (`issued_ns`). A partition or heal changes links one by one in between:
    a partition holds from its `t_ns`, and lasts until its heal's `issued_ns`."""
    return {**fault.model_dump(exclude_defaults=True), "at": fault.at, "action": fault.action, "t_ns": t_ns,
            "issued_ns": t_ns if issued_ns is None else issued_ns, "offset_s": round((t_ns - t0_ns) / 1e9, digits)}
