"""`peerlab bench local`: how many nodes the local backend starts and runs, with start-up time and RSS.

Each size runs floodsub over a random topology (8 outgoing connections per node), one topic that
every node joins, 1 message/s network-wide, for the given duration, without the Spark report. RSS is
sampled every 2 s from /proc for the orchestrator and every node process of the run.
"""
from __future__ import annotations

import gzip
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.runner import Runner
from orchestrator.scenario import parse_scenario

SCENARIO = """
name: bench-local-{n}
seed: 1
nodes: {{count: {n}}}
protocol: floodsub
topology: {{algorithm: random, degree: 8}}
network: {{latency: {{model: constant, one_way: 25ms}}}}
topics: {{count: 1}}
workload: {{publishers: {publishers}, rate: 1/s, warmup: 2s, duration: {duration}, drain: 3s, message_size: 1KiB}}
calibration: {{pairs: 4, throughput_nodes: 1}}
output: {{store: '{store}'}}
"""


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _node_pids(short: str) -> list[int]:
    pids = []
    marker = f"/peerlab/{short}/".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
    return pids


class RssSampler(threading.Thread):
    def __init__(self, short: str):
        super().__init__(daemon=True)
        self.short = short
        self.stop = threading.Event()
        self.peak_total = 0
        self.peak_orch = 0
        self.node_peaks: dict[int, int] = {}

    def run(self) -> None:
        while not self.stop.wait(2.0):
            orch = _rss_kib(os.getpid())
            nodes = {pid: _rss_kib(pid) for pid in _node_pids(self.short)}
            for pid, rss in nodes.items():
                self.node_peaks[pid] = max(self.node_peaks.get(pid, 0), rss)
            self.peak_orch = max(self.peak_orch, orch)
            self.peak_total = max(self.peak_total, orch + sum(nodes.values()))


def _delivery(run_dir: Path) -> float | None:
    """Delivery ratio from the logs without Spark (one topic that every node joined)."""
    published, delivered, nodes = set(), 0, 0
    for path in (run_dir / "events").glob("*.jsonl.gz"):
        nodes += 1
        with gzip.open(path, "rt") as f:
            for line in f:
                if '"publish_message"' in line:
                    published.add(json.loads(line)["msg_id"])
                elif '"deliver_message"' in line:
                    delivered += 1
    expected = len(published) * (nodes - 1)
    return delivered / expected if expected else None


def bench_local(sizes: list[int], duration: float, store: str, console: Console) -> list[dict[str, Any]]:
    results = []
    for n in sizes:
        sc = parse_scenario(SCENARIO.format(n=n, publishers=min(n, 10), duration=f"{duration}s", store=store))
        runner = Runner(sc, console=console)
        sampler = RssSampler(runner.short)
        sampler.start()
        started = time.monotonic()
        run_dir = runner.run()
        wall = time.monotonic() - started
        sampler.stop.set()
        sampler.join()
        peaks = list(sampler.node_peaks.values()) or [0]
        result = {
            "nodes": n, "startup_s": runner.manifest["startup_s"], "wall_s": round(wall, 1),
            "orchestrator_rss_mib": round(sampler.peak_orch / 1024, 1),
            "node_rss_mib_mean": round(sum(peaks) / len(peaks) / 1024, 1),
            "node_rss_mib_max": round(max(peaks) / 1024, 1),
            "total_rss_gib": round(sampler.peak_total / 1024**2, 2),
            "delivery_ratio": _delivery(run_dir), "run_dir": str(run_dir),
        }
        results.append(result)
        print(" ".join(f"{k}={v}" for k, v in result.items() if k != "run_dir"), flush=True)
    return results
