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
# of each 1 s period, per CPU. A node's delay line took up to 86 ms of a CPU's second while calibration's
# two 50 Mbit/s flows went through it (gossipsub-mixed on 3 nodes; docs/results.md); with 100 ms the
# kernel's RT throttling fired in a CI run's cluster tests (a throttled line holds its node's packets
# until the period ends)
PER_NODE_US = 250_000
SHARE_US = 750_000     # at most this much of the root's (usually 950,000) for all the nodes together


class BudgetError(RuntimeError):
    """A budget could not be read or written; the message names the file."""


def applies() -> bool:
    return (CPU / "cpu.rt_runtime_us").exists()


def _saved(s: Layout) -> Path:
    return s.root / "rt-budget-before"


def _cgroup(container: str) -> Path:
    """The container's own cpu cgroup (Docker's cgroupfs driver: <parent>/<id>; systemd's:
    system.slice/docker-<id>.scope), not one its processes made inside it."""
    done = subprocess.run(["docker", "inspect", "-f", "{{.Id}} {{.HostConfig.CgroupParent}}", container],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BudgetError(f"docker inspect {container}: {done.stderr.strip()}")
    cid, parent = (done.stdout.split() + [""])[:2]
    for candidate in (CPU / (parent.strip("/") or "docker") / cid, CPU / "system.slice" / f"docker-{cid}.scope"):
        if candidate.is_dir():
            return candidate
    raise BudgetError(f"container {container} has no cpu cgroup under {CPU}")


def grant(s: Layout, containers: list[str]) -> int:
    """Give each container (and Docker's parent cgroup, enough for all) an RT budget; the per-node one."""
    if not applies() or not containers:
        return 0
    try:
        return _grant(s, containers)
    except OSError as err:
        raise BudgetError(f"the nodes' real-time budget: {err}") from None


def _grant(s: Layout, containers: list[str]) -> int:
    per_node = min(PER_NODE_US, SHARE_US // len(containers))
    cgroups = [_cgroup(c) for c in containers]
    parent = cgroups[0].parent / "cpu.rt_runtime_us"
    before = int(parent.read_text())
    if not _saved(s).exists():
        s.root.mkdir(parents=True, exist_ok=True)
        _saved(s).write_text(f"{parent} {before}\n")
    need = per_node * len(containers)
    if before < need:
        parent.write_text(f"{need}\n")
    for cgroup in cgroups:
        (cgroup / "cpu.rt_runtime_us").write_text(f"{per_node}\n")
    return per_node


def revoke(s: Layout) -> bool:
    """Docker's parent cgroup's budget back to what it was (its node containers are gone by now)."""
    saved = _saved(s)
    if not applies() or not saved.exists():
        return False
    path, before = saved.read_text().split()
    if Path(path).exists():  # (a cgroup gone since has nothing to put back)
        try:
            Path(path).write_text(f"{before}\n")
        except OSError as err:
            raise BudgetError(f"putting back {path} ({before}): {err}") from None
    saved.unlink()
    return True
