"""The host's CPU as the kernel counts it: /proc/stat (time per state, tasks runnable) and
/proc/pressure/cpu (pressure stall information), read into snapshots, and two snapshots into one
sample of the interval between them. Pure parsing and arithmetic; `read` takes the /proc to read, so
the tests give it fixtures."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest time is inside user)
STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class Snapshot:
    at: float                      # time.monotonic() of the reading
    jiffies: dict[str, int]        # STATES, summed over the CPUs
    procs_running: float           # runnable tasks (the reader itself among them): at the reading, or
                                   # the mean of readings at random instants since the last snapshot
    psi_some_avg10: float | None   # % of the last 10 s some task waited for a CPU; None: no PSI
    psi_some_total_us: int | None  # cumulative stall time, us


@dataclass(frozen=True)
class Sample:
    """The interval between two snapshots."""
    at: float
    busy: float                 # share of CPU time not idle (nor waiting on I/O), steal included
    steal: float                # share stolen by the hypervisor
    runnable_per_core: float    # procs_running (less the reader) / cores, at the interval's end
    psi_some_pct: float | None  # % of the interval some task waited for a CPU (from the totals)
    psi_some_avg10: float | None


def parse_stat(text: str) -> tuple[dict[str, int], int]:
    """(jiffies per state over all CPUs, procs_running) from /proc/stat's text."""
    jiffies: dict[str, int] = {}
    running = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            jiffies = {state: (values[i] if i < len(values) else 0) for i, state in enumerate(STATES)}
        elif line.startswith("procs_running "):
            running = int(line.split()[1])
    if not jiffies:
        raise ValueError("/proc/stat has no aggregate cpu line")
    return jiffies, running


def parse_psi(text: str) -> tuple[float, int]:
    """(some avg10 %, some total us) from /proc/pressure/cpu's text."""
    for line in text.splitlines():
        if line.startswith("some "):
            fields = dict(part.split("=", 1) for part in line.split()[1:])
            return float(fields["avg10"]), int(fields["total"])
    raise ValueError("/proc/pressure/cpu has no `some` line")


def running(proc: Path = Path("/proc")) -> int:
    """procs_running now."""
    return parse_stat((proc / "stat").read_text())[1]


def read(at: float, proc: Path = Path("/proc"), mean_running: float | None = None) -> Snapshot:
    """A snapshot; `mean_running`: procs_running as read at several instants since the last one (a
    single reading can land on the moment periodic tasks wake together)."""
    jiffies, running = parse_stat((proc / "stat").read_text())
    if mean_running is not None:
        running = mean_running
    try:
        avg10, total = parse_psi((proc / "pressure" / "cpu").read_text())
    except (OSError, ValueError):  # kernel without CONFIG_PSI, or booted with psi=0
        avg10, total = None, None
    return Snapshot(at, jiffies, running, avg10, total)


def has_psi(proc: Path = Path("/proc")) -> bool:
    return read(0.0, proc).psi_some_total_us is not None


def cores() -> int:
    """The CPUs this process may run on (the nodes' share of the machine where it is the same)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def sample(before: Snapshot, after: Snapshot, ncores: int) -> Sample:
    delta = {s: after.jiffies[s] - before.jiffies[s] for s in STATES}
    total = sum(delta.values()) or 1
    idle = delta["idle"] + delta["iowait"]
    psi_pct = None
    if before.psi_some_total_us is not None and after.psi_some_total_us is not None:
        seconds = max(1e-6, after.at - before.at)
        psi_pct = min(100.0, (after.psi_some_total_us - before.psi_some_total_us) / 1e6 / seconds * 100)
    return Sample(at=after.at, busy=(total - idle) / total, steal=delta["steal"] / total,
                  runnable_per_core=max(0, after.procs_running - 1) / ncores,
                  psi_some_pct=psi_pct, psi_some_avg10=after.psi_some_avg10)
