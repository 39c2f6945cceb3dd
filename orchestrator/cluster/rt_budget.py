"""Real-time CPU time for the kind nodes' delay lines, where the kernel schedules real-time tasks by
cgroup (cgroup v1 with RT group scheduling: /sys/fs/cgroup/cpu/cpu.rt_runtime_us exists). There a
task gets a real-time priority only if its cgroup and every one above it has an RT budget, and Docker
gives its containers none (its parent cgroup's cpu.rt_runtime_us is 0). `grant` gives Docker's parent
cgroup and each node container a budget; each node's shaping daemon then starts its delay line in its
node's root cgroup (orchestrator/shaping/realtime.py). `revoke` puts the parent's budget back as it
was before `grant`. Elsewhere (cgroup v2, or no RT group scheduling) both do nothing.

May import: orchestrator.cluster.layout.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.cluster.layout import Layout

CPU = Path("/sys/fs/cgroup/cpu")
PER_NODE_US = 100_000  # of each 1 s period, per CPU: the delay line needs a few per cent


def applies() -> bool:
    return (CPU / "cpu.rt_runtime_us").exists()


def _saved(s: Layout) -> Path:
    return s.root / "rt-budget-before"


def _cgroup(container: str) -> Path:
    done = subprocess.run(["docker", "inspect", "-f", "{{.Id}} {{.HostConfig.CgroupParent}}", container],
                          capture_output=True, text=True, check=True)
    cid, parent = (done.stdout.split() + [""])[:2]
    return CPU / (parent.strip("/") or "docker") / cid


def grant(s: Layout, containers: list[str]) -> int:
    """Give each container (and Docker's parent cgroup, enough for all) an RT budget; the per-node one."""
    if not applies() or not containers:
        return 0
    cgroups = [_cgroup(c) for c in containers]
    parent = cgroups[0].parent / "cpu.rt_runtime_us"
    before = int(parent.read_text())
    if not _saved(s).exists():
        s.root.mkdir(parents=True, exist_ok=True)
        _saved(s).write_text(f"{parent} {before}\n")
    need = PER_NODE_US * len(containers)
    if before < need:
        parent.write_text(f"{need}\n")
    for cgroup in cgroups:
        (cgroup / "cpu.rt_runtime_us").write_text(f"{PER_NODE_US}\n")
    return PER_NODE_US


def revoke(s: Layout) -> bool:
    """Docker's parent cgroup's budget back to what it was (its node containers are gone by now)."""
    saved = _saved(s)
    if not applies() or not saved.exists():
        return False
    path, before = saved.read_text().split()
    Path(path).write_text(f"{before}\n")
    saved.unlink()
    return True
