"""`peerlab bench soak`: one long local run of GossipSub at a steady rate with churn and a partition
every few minutes, watched from outside for leaks.

Every `every` seconds it prints the orchestrator's RSS and open file descriptors, the run's network
namespaces and the processes under the orchestrator; at the end, the run's accounting from the
analysis (every planned publish logged, or its publisher down: nothing unaccounted) and the growth
of RSS and descriptors from the first sample after T0 to the last. It fails (exit 1, each reason on a
line) on a publish unaccounted for, anything left after the run, or growth past RSS_GROWTH_MIB (or
RSS_GROWTH_SHARE of the first sample) and FDS_GROWTH descriptors (`problems`).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.procfs import descendants, memory_kib
from orchestrator.run.admission import admit
from orchestrator.run.runner import Runner

SCENARIO = """
name: soak
seed: {seed}
nodes: {{count: {nodes}}}
protocol: gossipsub
network: {{latency: {{model: constant, one_way: 25ms}}}}
topics: {{count: 1}}
workload: {{publishers: 5, rate: {rate}/s, warmup: 5s, duration: {duration}s, drain: 5s, message_size: 1KiB}}
churn: {{fraction: 0.3, session: {{mean: 60s}}, downtime: {{mean: 10s}}}}
calibration: {{enabled: false}}
faults: [{partitions}]
output: {{store: '{store}'}}
"""
PARTITION_EVERY_S = 300
PARTITION_S = 20


def soak_scenario(duration_s: float, nodes: int, rate: float, store: str, seed: int = 1) -> str:
    """The soak's scenario: a partition of half the nodes for 20 s every 5 minutes (the first after
    1 minute, none in the last minute). A soak shorter than 4 minutes has one, a quarter of the run in,
    for a quarter of it at most (a check of the accounting through a cut and its heal in a short soak)."""
    half = ", ".join(f"n{i}" for i in range(nodes // 2))
    first, length = min(60, int(duration_s) // 4), min(PARTITION_S, int(duration_s) // 4)
    starts = range(first, max(first + 1, int(duration_s) - 60), PARTITION_EVERY_S)
    partitions = ", ".join(f"{{at: {t}s, action: partition, groups: [[{half}]], duration: {length}s}}"
                           for t in starts if length and t + length < duration_s)
    return SCENARIO.format(seed=seed, nodes=nodes, rate=rate, duration=int(duration_s), store=store,
                           partitions=partitions)


def sample(runner: Runner) -> dict[str, Any]:
    from pyroute2 import netns

    prefix = f"pl{runner.short}-"
    return {"rss_mib": round(memory_kib(os.getpid())[0] / 1024, 1), "fds": len(os.listdir("/proc/self/fd")),
            "namespaces": sum(1 for n in netns.listnetns() if n.startswith(prefix)),
            "processes": len(descendants(os.getpid()))}


class SoakSampler(threading.Thread):
    def __init__(self, runner: Runner, every: float, console: Console):
        super().__init__(daemon=True)
        self.runner, self.every, self.console = runner, every, console
        self.stop = threading.Event()
        self.samples: list[dict[str, Any]] = []
        self.started = time.monotonic()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            s = {"t_s": round(time.monotonic() - self.started), "after_t0": self.runner.t0_ns is not None,
                 **sample(self.runner)}
            self.samples.append(s)
            print(" ".join(f"{k}={v}" for k, v in s.items()), flush=True)


def bench_soak(duration_s: float, every_s: float, nodes: int, rate: float, store: str, console: Console) -> dict[str, Any]:
    from analysis.job import analyse

    scenario = parse_scenario(soak_scenario(duration_s, nodes, rate, store))
    admitted = admit(scenario, "local")  # before planning: it can be slow
    runner = Runner(scenario, make_plan(scenario), console=console, admitted=admitted)
    sampler = SoakSampler(runner, every_s, console)
    sampler.start()
    try:
        run_dir: Path = runner.run()
    finally:
        sampler.stop.set()
        sampler.join()
    after = sample(runner)
    running = [s for s in sampler.samples if s["after_t0"]] or sampler.samples
    metrics = analyse(run_dir, console=console)
    acc = metrics["accounting"]
    result = {
        "duration_s": duration_s, "nodes": nodes, "samples": len(sampler.samples),
        "rss_first_mib": running[0]["rss_mib"] if running else None,
        "rss_last_mib": running[-1]["rss_mib"] if running else None,
        "rss_growth_mib": round(running[-1]["rss_mib"] - running[0]["rss_mib"], 1) if running else None,
        "fds_max": max((s["fds"] for s in sampler.samples), default=None),
        "fds_growth": running[-1]["fds"] - running[0]["fds"] if running else None,
        "namespaces_after": after["namespaces"], "processes_after": after["processes"],
        "faults": len(runner.manifest.get("faults_executed", [])),
        "published_planned": acc["published_planned"], "unaccounted": acc["unaccounted"],
        "delivery_ratio_up": metrics.get("delivery_ratio_up"), "run_dir": str(run_dir),
    }
    print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    return result


# what a soak may grow by, from the first sample after T0 to the last, and still pass
RSS_GROWTH_MIB = 32.0    # the orchestrator's RSS (it holds per-node clients, buffers and samples)
RSS_GROWTH_SHARE = 0.25  # or this share of its first sample, if larger
FDS_GROWTH = 16          # open descriptors (a restart briefly holds a pipe or two)


def problems(result: dict[str, Any]) -> list[str]:
    """Why a soak failed (empty: it passed): a publish not accounted for, anything of the run left
    after it (namespaces, processes), or the orchestrator's RSS or descriptors grown past the limits."""
    out = []
    if result["unaccounted"]:
        out.append(f"{result['unaccounted']} planned publishes neither logged nor explained by a publisher down")
    if result["namespaces_after"]:
        out.append(f"{result['namespaces_after']} of the run's network namespaces left after it")
    if result["processes_after"]:
        out.append(f"{result['processes_after']} processes left under the orchestrator after the run")
    growth, first = result["rss_growth_mib"], result["rss_first_mib"]
    if growth is not None and growth > max(RSS_GROWTH_MIB, RSS_GROWTH_SHARE * (first or 0)):
        out.append(f"the orchestrator's RSS grew by {growth} MiB (from {first} MiB; at most "
                   f"{max(RSS_GROWTH_MIB, RSS_GROWTH_SHARE * (first or 0)):.0f} MiB)")
    if result["fds_growth"] is not None and result["fds_growth"] > FDS_GROWTH:
        out.append(f"the orchestrator's open descriptors grew by {result['fds_growth']} (at most {FDS_GROWTH})")
    return out
