"""A real-time priority for the delay line on a cluster node where the kernel schedules real-time
tasks by cgroup (cgroup v1 with RT group scheduling). There a task may take SCHED_FIFO only if its
cgroup and every one above it has an RT budget (cpu.rt_runtime_us), which no pod's cgroup has. The
shaping daemon mounts its node's cpu hierarchy ($PEERLAB_RT_CGROUP, charts/peerlab-shaper); when that
root has a budget (`peerlab cluster up` gives the kind nodes one: orchestrator/cluster/rt_budget.py),
the delay line is moved there before it starts, and its own sched_setscheduler then succeeds.
Elsewhere nothing is moved. May import nothing of peerlab.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

ROOT_ENV = "PEERLAB_RT_CGROUP"


def budget(root: Path) -> int:
    try:
        return int((root / "cpu.rt_runtime_us").read_text())
    except (OSError, ValueError):
        return 0


def preexec() -> Callable[[], None] | None:
    """What a child runs before its program, to be in the node's root cpu cgroup; None where not needed
    or not possible (no RT group scheduling here, no mount of the node's hierarchy, no budget there)."""
    root = Path(os.environ.get(ROOT_ENV) or "/nonexistent")
    if not (Path("/sys/fs/cgroup/cpu/cpu.rt_runtime_us").exists() and budget(root) > 0):
        return None
    procs = root / "cgroup.procs"

    def move() -> None:
        procs.write_text(f"{os.getpid()}\n")
    return move
