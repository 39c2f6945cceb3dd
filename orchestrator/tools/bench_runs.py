"""Benchmarks that print figures.

`peerlab bench local`: how many nodes the local backend starts and runs, with start-up time and
memory. Each size runs floodsub over a random topology (8 outgoing connections per node), one topic
that every node joins, 1 message/s network-wide, for the given duration.
`peerlab bench gossipsub`: the same figures for scenarios/gossipsub-large.yaml at each node count
(any variant or size through --set), plus L100, and the largest count that kept delivery 1.0.
Both run without the Spark report. Memory is sampled every 2 s from /proc for the orchestrator, the
fork server and every node process: RSS per process, and PSS (shared pages split between sharers)
for the total the run occupies (the run's memory watch, delay line and probes included); and each node process's CPU time, as a mean share of a core from
start-up to teardown (set-up, warm-up and drain included).
`peerlab bench router`: GossipSub router CPU per relayed message, on the in-memory network.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from node.paths import ROOT
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.procfs import cpu_s, memory_kib
from orchestrator.run.admission import admit
from orchestrator.run.runner import Runner

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


class MemorySampler(threading.Thread):
    """Samples the orchestrator and every node process of a run every 2 s: RSS and PSS, and each node
    process's CPU time between the first and the last sample that saw it (the run's total PSS is its
    own memory watch's)."""

    def __init__(self, runner: Runner):
        super().__init__(daemon=True)
        self.runner = runner
        self.stop = threading.Event()
        self.peak_orch = 0
        self.node_rss: dict[int, int] = {}
        self.node_pss: dict[int, int] = {}
        self.node_cpu: dict[int, tuple[float, float, float, float]] = {}  # first (t, cpu), last (t, cpu)

    def cpu_share(self) -> float | None:
        """Mean share of a core per node process: CPU seconds over wall seconds, over the samples."""
        spans = [(c1 - c0, t1 - t0) for t0, c0, t1, c1 in self.node_cpu.values() if t1 > t0]
        wall = sum(dt for _, dt in spans)
        return sum(dc for dc, _ in spans) / wall if wall else None

    def run(self) -> None:
        while not self.stop.wait(2.0):
            backend = self.runner.backend
            node_pids = list(getattr(backend, "pids", {}).values())
            orch_rss, _ = memory_kib(os.getpid())
            for pid in node_pids:
                rss, pss = memory_kib(pid)
                if rss:
                    self.node_rss[pid] = max(self.node_rss.get(pid, 0), rss)
                    self.node_pss[pid] = max(self.node_pss.get(pid, 0), pss)
                cpu, now = cpu_s(pid), time.monotonic()
                if cpu is not None:
                    first = self.node_cpu.get(pid, (now, cpu, now, cpu))
                    self.node_cpu[pid] = (first[0], first[1], now, cpu)
            self.peak_orch = max(self.peak_orch, orch_rss)


def _delivery(run_dir: Path) -> tuple[float | None, float | None]:
    """Delivery ratio and mean L100 (ms, over messages that reached everyone) from the logs without
    Spark; for runs with one topic that every node joined."""
    published: dict[str, int] = {}
    last: dict[str, list[int]] = {}
    delivered, nodes = 0, 0
    for path in (run_dir / "events").glob("*.jsonl.gz"):
        nodes += 1
        with gzip.open(path, "rt") as f:
            for line in f:
                if '"publish_message"' in line:
                    e = json.loads(line)
                    published[e["msg_id"]] = e["ts"]
                elif '"deliver_message"' in line:
                    e = json.loads(line)
                    delivered += 1
                    last.setdefault(e["msg_id"], []).append(e["ts"])
    expected = len(published) * (nodes - 1)
    full = [(max(ts) - published[m]) / 1e6 for m, ts in last.items() if m in published and len(ts) == nodes - 1]
    return (delivered / expected if expected else None), (sum(full) / len(full) if full else None)


def bench_local(sizes: list[int], duration: float, store: str, console: Console) -> list[dict[str, Any]]:
    return bench_scale([parse_scenario(SCENARIO.format(n=n, publishers=min(n, 10), duration=f"{duration}s",
                                                       store=store)) for n in sizes], console)


def bench_gossipsub(sizes: list[int], overrides: list[str], store: str, console: Console,
                    scenario: str = "scenarios/gossipsub-large.yaml") -> list[dict[str, Any]]:
    from orchestrator.model.scenario import load_scenario

    path = Path(scenario) if Path(scenario).exists() else ROOT / scenario
    # a scenario's own matrix is not expanded here: its base values run, with the --set overrides
    scenarios = [load_scenario(path, [*overrides, f"nodes.count={n}", f"output.store={store}"]) for n in sizes]
    results = bench_scale(scenarios, console)
    sustained = [r["nodes"] for r in results if r["delivery_ratio"] == 1.0]
    print(f"largest node count with delivery 1.0: {max(sustained) if sustained else 'none'}", flush=True)
    return results


def bench_scale(scenarios: list[Any], console: Console) -> list[dict[str, Any]]:
    results = []
    for sc in scenarios:
        n = sc.nodes.count
        admitted = admit(sc, "local")  # before planning: it can be slow
        runner = Runner(sc, make_plan(sc), console=console, admitted=admitted)
        sampler = MemorySampler(runner)
        sampler.start()
        started = time.monotonic()
        run_dir = runner.run()
        wall = time.monotonic() - started
        sampler.stop.set()
        sampler.join()
        rss = list(sampler.node_rss.values()) or [0]
        pss = list(sampler.node_pss.values()) or [0]
        result = {
            "nodes": n, "startup_s": runner.manifest.get("startup_s"), "wall_s": round(wall, 1),
            "orchestrator_rss_mib": round(sampler.peak_orch / 1024, 1),
            "node_rss_mib_mean": round(sum(rss) / len(rss) / 1024, 1),
            "node_rss_mib_max": round(max(rss) / 1024, 1),
            "node_pss_mib_mean": round(sum(pss) / len(pss) / 1024, 1),
            "node_cpu_pct_mean": None if sampler.cpu_share() is None else round(100 * sampler.cpu_share(), 2),
            # the run's own watch (orchestrator/run/memory_watch.py), as its manifest records it
            "total_pss_gib": round((runner.manifest["admission"].get("peak_mib") or 0) / 1024, 2),
            "run_dir": str(run_dir),
        }
        result["delivery_ratio"], l100 = _delivery(run_dir)
        result["L100_ms"] = None if l100 is None else round(l100, 1)
        results.append(result)
        print(" ".join(f"{k}={v}" for k, v in result.items() if k != "run_dir"), flush=True)
    return results


def bench_router(sizes: list[int], messages: int, mesh: int = 8) -> list[dict[str, Any]]:
    """CPU time of one GossipSub relay per message: decode, dedupe, verify the signature, IDONTWANT,
    cache and relay to a mesh of `mesh` peers, on the in-memory network (no sockets: the router's own
    cost)."""
    from node.protocols.gossipsub.core import GossipSub, GossipSubParams
    from node.protocols.pubsub.pubsub_pb2 import RPC
    from node.simulated.virtual_network import MemNetwork

    results = []
    for size in sizes:
        params = GossipSubParams(D=mesh, D_lo=max(1, mesh - 2), D_hi=mesh + 4, D_out=0, max_rpc_size=size + 4096)
        net = MemNetwork.star(GossipSub, params, mesh + 1, topic="t", seed=1, until=3)
        relay = net.nodes["n0"]
        relay.events.clear()
        data = os.urandom(size)
        origin = net.nodes["n1"].core.ids  # signed by n1, as its own publish would be
        frames = [RPC(publish=[origin.author(k, "t", data)]).SerializeToString() for k in range(messages)]
        started = time.process_time()
        for frame in frames:
            relay.core.on_frame("n1", frame)
        cpu = time.process_time() - started
        sent = sum(1 for e in relay.events if e["type"] == "send_rpc" and e.get("msgs"))
        result = {"size": size, "messages": messages, "mesh": len(relay.core.mesh["t"]),
                  "relayed_copies": sent, "cpu_us_per_message": round(cpu / messages * 1e6, 1)}
        results.append(result)
        print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    return results


def bench_topiary_sweep(path: str, overrides: list[str], matrix_args: list[str], console: Any) -> list[dict[str, Any]]:
    """Topiary's parameters swept on the in-memory network (virtual time), each combination on the
    same plan as the scenario, against the same plan run as random-overlay. Prints one line per
    combination: converged receive rate and delay (mean of the last 5 windows of epoch length)."""
    from orchestrator.model.matrix import expand
    from orchestrator.sim.outcomes import converged, per_window, run_in_memory

    def measure(sc) -> dict[str, float]:
        plan = make_plan(sc)
        width = float(plan.nodes[0].params.get("epoch") or 10.0)
        windows = max(1, math.ceil(plan.duration / width - 1e-9))
        started = time.perf_counter()
        outcomes = run_in_memory(plan)
        rate, delay = per_window(outcomes, plan.warmup, width, windows)
        out = {"receive_rate": converged(rate), "delay_ms": converged(delay)}
        victims = {n.behaviour["topic"] for n in plan.nodes if n.behaviour.get("topic")}
        if victims:  # the attacked topic's own rate, over the last 5 windows
            v_rate, _ = per_window([m for m in outcomes if m.topic in victims], plan.warmup, width, windows)
            out["victim_receive_rate"] = converged(v_rate)
        console.print(f"  ran {len(plan.nodes)} nodes, {plan.publishes()} messages in "
                      f"{time.perf_counter() - started:.0f}s (virtual time)")
        return out

    def line(label: str, m: dict[str, float]) -> str:
        return f"{label}: " + " ".join(f"{k}={v:.4f}" if "rate" in k or k == "vs_random" else f"{k}={v:.1f}"
                                       for k, v in m.items())

    base = measure(expand(path, [*overrides, "protocol=random-overlay"])[0].scenario)
    print(line("random-overlay", base), flush=True)
    rows = []
    for combo in expand(path, overrides, matrix_args):
        m = measure(combo.scenario)
        m["vs_random"] = m["delay_ms"] / base["delay_ms"] - 1
        rows.append({"label": combo.label or "defaults", **m})
        print(line(rows[-1]["label"], m), flush=True)
    return rows
