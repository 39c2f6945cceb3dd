"""`peerlab bench sim`: what the simulation costs. For each scenario: memory per node (tracemalloc
over building the network and running it to T0: cores, connections, queues), the engine's memory per
frame in flight (payload bytes excluded: a relayed payload is one shared object), then the whole run
with its event files (written to a scratch directory and removed): simulated seconds per wall
second, engine events per second, log events, peak RSS."""
from __future__ import annotations

import shutil
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from rich.console import Console

from node.protocols.base import ProtocolCore
from node.simulated.virtual_network import MemNetwork
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import load_scenario
from orchestrator.sim.engine import EventFiles, Simulation


class _Sink(ProtocolCore):
    name = "sink"


def frame_overhead_bytes(frames: int = 20_000) -> dict[str, float]:
    """Engine bytes per frame: queued behind a busy uplink, and propagating (scheduled arrival)."""
    out = {}
    payload = bytes(100)
    for state, bandwidth in (("queued", (8.0, 8.0)), ("propagating", None)):
        net = MemNetwork(seed=1, latency=1.0)
        for name in ("a", "b"):
            net.add_node(name, _Sink, bandwidth=bandwidth)
        net.connect("a", "b")
        net.run(until=2)
        io = net.nodes["a"].core.io
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(frames):
            io.send("b", payload)
        out[state] = (tracemalloc.get_traced_memory()[0] - before) / frames
        tracemalloc.stop()
    return out


def node_state_bytes(path: str, overrides: list[str]) -> tuple[int, float]:
    plan = make_plan(load_scenario(path, overrides))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    Simulation(plan, lambda node, event: None).start_up()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return len(plan.nodes), used / len(plan.nodes)


def bench_sim(paths: list[str], overrides: list[str], console: Console) -> list[dict[str, Any]]:
    frame = frame_overhead_bytes()
    console.print(f"engine memory per frame in flight: {frame['queued']:.0f} B queued, "
                  f"{frame['propagating']:.0f} B propagating (payload excluded)")
    rows = []
    for path in paths:
        nodes, per_node = node_state_bytes(path, overrides)
        console.print(f"{path}: {nodes} nodes, {per_node / 1024:.1f} KiB per node at T0 (tracemalloc)")
        plan = make_plan(load_scenario(path, overrides))
        scratch = Path(tempfile.mkdtemp(prefix="peerlab-bench-sim-"))
        try:
            files = EventFiles(scratch, [n.id for n in plan.nodes])
            stats = Simulation(plan, files).run(progress=console.print, every=max(10.0, plan.end / 5))
            files.flush()
            stats.log_events = files.written
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        console.print(f"{path}: {stats.summary()}")
        row = {"scenario": path, "nodes": nodes, "sim_s": stats.virtual_s, "wall_s": stats.wall_s,
               "sim_s_per_wall_s": round(stats.speed, 3), "events_per_s": round(stats.events_per_s),
               "log_events": stats.log_events, "peak_rss_mib": stats.peak_rss_mib,
               "state_per_node_kib": round(per_node / 1024, 1),
               "frame_queued_b": round(frame["queued"]), "frame_propagating_b": round(frame["propagating"])}
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return rows
