"""What a run really occupies in memory, as it goes: the sum of PSS (a shared page split between its
sharers) over the orchestrator's process tree (the fork server, the nodes it forked, the delay
lines, the probes) and every process the backend runs for the run outside that tree on this host
(the docker backend's containers and their shims), sampled every 2 s (less often where a sample
would take more than 2% of a core: 400 processes take about 0.5 s). Its peak goes into the
manifest's `admission` beside the estimate (orchestrator/run/admission.py), so that every run checks
the estimate that admitted it. Of each sample, what the calibration and fidelity probes beside
adapter nodes hold (orchestrator/fidelity/netprobe.py: processes whose command carries its
PROBE_MARK) is counted apart too, so the bench can tell a node's cost from its probes'.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable

from orchestrator.fidelity.netprobe import PROBE_MARK
from orchestrator.procfs import memory_kib, tree

INTERVAL_S = 2.0
COST_SHARE = 0.02  # of a core the sampling may take: reading smaps costs 1-1.5 ms per process


def occupied(roots: Iterable[int]) -> tuple[int, int, int]:
    """(PSS of every process in the trees under `roots`, each counted once; of it, the probes' PSS;
    how many probe processes) in KiB."""
    seen: set[int] = set()
    for root in roots:
        seen.update(tree(root))
    total = probes_kib = probes = 0
    for pid in seen:
        pss = memory_kib(pid)[1]
        total += pss
        if pss and _is_probe(pid):
            probes_kib += pss
            probes += 1
    return total, probes_kib, probes


def _is_probe(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return PROBE_MARK.encode() in f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False


def record_peak(manifest: dict[str, Any], peak: float | None, checked: bool,
                breakdown: dict[str, Any] | None = None) -> None:
    """The run's measured peak, and the cores the host was busy over the load phase, beside the
    estimate that admitted it (`checked`: a backend whose nodes are this host's processes)."""
    record = manifest["admission"]
    if peak is None or not checked:
        return
    record["peak_mib"] = peak
    record.update(breakdown or {})  # of the peak, the probes beside adapter nodes; the drain's end
    if "estimate" in record:
        record["estimate_error_pct"] = round(100 * (record["estimate"]["memory_mib"] - peak) / peak, 1)
    busy = ((manifest.get("fidelity") or {}).get("phases", {}).get("load", {}).get("host") or {}).get("cpu_busy_pct")
    if busy and "machine" in record:
        record["busy_cores_load"] = round(busy["mean"] / 100 * record["machine"]["cpus"], 3)


class MemoryWatch(threading.Thread):
    """Samples the run's memory every INTERVAL_S until stopped; `peak_mib` is the largest sample.
    `others()`: the run's processes outside the orchestrator's tree (the backend's `host_pids`).
    The runner also takes a sample when the drain ends, before the nodes stop: what the nodes hold
    grows with what was published, so the end of a run is often its peak, which samples far apart
    (a large run's) would miss by up to an interval."""

    def __init__(self, others: Callable[[], Iterable[int]] = lambda: ()):
        super().__init__(daemon=True, name="memory-watch")
        self.others = others
        self.halt = threading.Event()
        self.peak_kib = 0
        self.peak_probes = (0, 0)  # (KiB, processes) of the probes in the peak's sample
        self.drain_end_kib: int | None = None  # the runner's sample as the drain ends (the probes gone)
        self.samples = 0
        self._lock = threading.Lock()

    def sample(self, drain_end: bool = False) -> float:
        """One sample; the CPU time it took (seconds). `drain_end`: the runner's, kept apart too."""
        started = time.thread_time()
        try:
            roots = [os.getpid(), *self.others()]
        except Exception:  # noqa: BLE001 - a backend mid-teardown: the next sample will do
            return 0.0
        kib, probes_kib, probes = occupied(roots)
        with self._lock:  # (the runner's last sample comes from another thread)
            if kib > self.peak_kib:
                self.peak_kib, self.peak_probes = kib, (probes_kib, probes)
            if drain_end:
                self.drain_end_kib = kib
            self.samples += 1
        return time.thread_time() - started

    def run(self) -> None:
        while True:
            cost = self.sample()
            # every INTERVAL_S, or less often where many processes make a sample dear
            if self.halt.wait(max(INTERVAL_S, cost / COST_SHARE)):
                return

    def finish(self) -> float | None:
        """Stop sampling; the peak in MiB (None if nothing was sampled)."""
        if self.is_alive():
            self.halt.set()
            self.join()
        return round(self.peak_kib / 1024, 1) if self.samples else None

    def breakdown(self) -> dict[str, Any]:
        """What the bench tells apart: the probes in the peak's sample (MiB, processes), and the
        sample as the drain ended (the nodes up, the fidelity probes stopped)."""
        out: dict[str, Any] = {"probes_at_peak": {"mib": round(self.peak_probes[0] / 1024, 1),
                                                  "processes": self.peak_probes[1]}}
        if self.drain_end_kib is not None:
            out["drain_end_mib"] = round(self.drain_end_kib / 1024, 1)
        return out
