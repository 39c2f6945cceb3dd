"""`peerlab bench admission`: what a node costs in memory and CPU, measured by runs, written into the
table admission reads (orchestrator/run/admission_costs.json).

Every run's memory is the peak of the sum of PSS over its processes (orchestrator/run/memory_watch.py:
the orchestrator, the fork server and the nodes it forked, the delay line, and on docker every
container with its shim). Per backend:
- peerlab's GossipSub at two node counts: the line through the two peaks gives the run's fixed cost
  (its intercept: orchestrator, fork server, delay line) and GossipSub's cost per node (its slope);
- every other kind of node (peerlab's other protocols, each libp2p implementation) at one count:
  (peak - fixed) / nodes; for an adapter's nodes the peak less the probe processes in its sample, or
  the sample as the drain ended (the probes stopped), whichever is higher: the probes beside them
  (orchestrator/fidelity/netprobe.py) are admission's own term, their MiB per process measured here
  from those samples;
- CPU: the same runs' busy cores less the traffic term below; each kind runs again at SLOW's rate
  (local; content-based protocols, whose scenarios fix their own workload, do not), so a node's
  cores split into what it costs idle and what each message per second costs it (the estimate for a
  run at another rate: the implementations scenario publishes one message every 4 s). The
  per-message figures are the programs' work, shared with docker as the traffic's are;
- (local) GossipSub with large messages at a high rate against the same with 1 KiB ones: the extra
  memory per node over the bytes published per second is how many seconds' worth of messages a node
  holds (message cache, socket buffers), the estimate's term for message size and rate.
- (local) GossipSub with medium messages against the same 1 KiB run, neither saturating the cores
  (the medium one keeps about half of them busy; its timing is not faithful, its CPU time is what
  the work took): the CPU the machine spent (host busy over the load phase: nodes, kernel, delay line, shaper)
  against the bytes the nodes' links sent (their kernel counters) gives the CPU per MiB moved, and the
  bytes sent against the bytes published times the nodes how many copies of a published byte the
  nodes send: the estimate's CPU term for what the run moves.
"""
from __future__ import annotations

import datetime
import gzip
import json
import os
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from node.paths import ROOT
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import load_scenario, parse_scenario
from orchestrator.run.admission import COSTS_FILE, admit, kind_of
from orchestrator.run.runner import Runner

TEMPLATE = """
name: admission-{label}
seed: 1
nodes: {{count: {n}}}
protocol: {{name: {protocol}, implementation: {implementation}}}
topology: {{algorithm: random, degree: 8}}
network: {{latency: {{model: constant, one_way: 25ms}}}}
topics: {{count: 1}}
workload: {{publishers: {publishers}, rate: {rate}/s, warmup: 5s, duration: 15s, drain: 3s, message_size: {size}}}
calibration: {{pairs: 2, throughput_nodes: 1}}
output: {{store: '{store}'}}
"""
BASE = {"peerlab/gossipsub": (10, 40)}           # the two counts of the line (local; docker: DOCKER_BASE)
DOCKER_BASE = (6, 16)
OTHERS = ["peerlab/floodsub", "peerlab/topiary", "peerlab/pulsarcast", "peerlab/scoutsubs",
          "peerlab/fastdelivery", "go-libp2p", "rust-libp2p", "js-libp2p", "py-libp2p"]
ONE_COUNT = {"local": 30, "docker": 10}
# content-based protocols need their predicates and events: their own scenarios, shortened
CONTENT_BASED = {"peerlab/scoutsubs": "scenarios/smartpubsub-normal.yaml",
                 "peerlab/fastdelivery": "scenarios/smartpubsub-fastdelivery.yaml"}
# message size (text, bytes), rate per second; LARGE and MEDIUM keep the cores short of saturation (about
# half busy; their runs' verdicts are in the table): a node starved of CPU holds what it cannot forward yet
SMALL, LARGE = ("1KiB", 1024, 4), ("64KiB", 65536, 2)
MEDIUM = ("16KiB", 16384, 4)  # for the CPU per byte: enough traffic to measure, the cores not saturated
SLOW = ("1KiB", 1024, 0.5)    # against SMALL: the CPU a message per second costs each node


def _scenario(kind: str, n: int, store: str, message: tuple[str, int, int] = SMALL) -> Any:
    if kind in CONTENT_BASED:  # (at its own node count where its groups fix it)
        path = ROOT / CONTENT_BASED[kind]
        count = [] if "groups:" in path.read_text() else [f"nodes.count={n}"]
        return load_scenario(path, [*count, "workload.duration=15s", f"output.store={store}"])
    protocol, implementation = ("gossipsub", kind) if "/" not in kind else (kind.split("/")[1], "peerlab")
    return parse_scenario(TEMPLATE.format(label=kind.replace("/", "-"), n=n, publishers=min(n, 10), protocol=protocol,
                                          implementation=implementation, size=message[0], rate=message[2],
                                          store=store))


def _run(scenario: Any, backend: str, console: Console) -> Path:
    admitted = admit(scenario, backend, True)  # before planning: it can be slow
    return Runner(scenario, make_plan(scenario), backend=backend, console=console, force=True, admitted=admitted).run()


def _peak(run_dir: Path) -> dict[str, Any]:
    """The run's peak memory in MiB as its manifest records it; the probes in the peak's sample and
    what its nodes held without them (the peak less them, or the drain's end if more)."""
    record = json.loads((run_dir / "manifest.json").read_text())["admission"]
    if record.get("peak_mib") is None:
        raise RuntimeError(f"{run_dir}: no memory was sampled")
    probes = record.get("probes_at_peak") or {"mib": 0.0, "processes": 0}
    without = max(record["peak_mib"] - probes["mib"], record.get("drain_end_mib") or 0.0)
    return {"peak_mib": record["peak_mib"], "probes_at_peak": probes, "without_probes_mib": round(without, 1)}


def load_rates(run_dir: Path) -> tuple[float, float]:
    """(cores busy, bytes sent per second by all nodes' links) over the run's load phase: the host's
    mean busy share times its cores, and the nodes' kernel counters across the phase."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    phase = manifest.get("fidelity", {}).get("phases", {}).get("load") or {}
    busy = (phase.get("host") or {}).get("cpu_busy_pct")
    if not busy or phase.get("to_ns") is None:
        raise RuntimeError(f"{run_dir}: no host samples over its load phase; the measurement is void")
    cores = busy["mean"] / 100 * manifest["admission"]["machine"]["cpus"]
    first: dict[str, tuple[int, int]] = {}
    last: dict[str, tuple[int, int]] = {}
    with gzip.open(run_dir / "kernel_traffic.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            if phase["from_ns"] <= row["ts"] <= phase["to_ns"]:
                first.setdefault(row["node"], (row["ts"], row["sent_bytes"]))
                last[row["node"]] = (row["ts"], row["sent_bytes"])
    span = (max(t for t, _ in last.values()) - min(t for t, _ in first.values())) / 1e9 if last else 0.0
    if span <= 0:
        raise RuntimeError(f"{run_dir}: no link counters across its load phase; the measurement is void")
    return cores, sum(last[n][1] - first[n][1] for n in last) / span


def traffic_cpu(small: Path, medium: Path, n: int) -> dict[str, float]:
    """CPU seconds per MiB the nodes' links send, and copies sent per byte published per node, from two
    runs of `n` nodes that differ in message size (SMALL, MEDIUM)."""
    (cores_s, sent_s), (cores_m, sent_m) = load_rates(small), load_rates(medium)
    published = MEDIUM[1] * MEDIUM[2] - SMALL[1] * SMALL[2]
    if sent_m <= sent_s or cores_m <= cores_s:
        raise RuntimeError(f"{medium}: no more traffic or CPU than {small}; the measurement is void")
    return {"cpu_s_per_mib_sent": round((cores_m - cores_s) / ((sent_m - sent_s) / 2**20), 4),
            "copies_sent": round((sent_m - sent_s) / (published * n), 2)}


def bench_admission(backends: list[str], store: str, console: Console, table: Path = COSTS_FILE,
                    say: Callable[[str], None] = lambda m: print(m, flush=True)) -> dict[str, Any]:
    """Measure `backends` and write the table; a backend not measured keeps its entry from the table."""
    old = json.loads(table.read_text()) if table.exists() else {"backends": {}}
    out: dict[str, Any] = {"command": "peerlab bench admission", "host": f"{os.cpu_count()} cores",
                           "backends": dict(old.get("backends", {}))}
    for backend in backends:
        local = out["backends"].get("local") or {}
        shared = {k: local.get(k) for k in SHARED} if backend != "local" else {}
        out["backends"][backend] = _measure_backend(backend, store, console, say, shared)
        # after each backend: a later one's failure (no engine, no base image) keeps what was measured
        table.write_text(json.dumps(out, indent=1) + "\n")
        say(f"written: {table} ({backend})")
    return out


class _Runs:
    """The bench's runs on one backend: each one's memory peak, busy cores and bytes sent, by label."""

    def __init__(self, backend: str, store: str, console: Console):
        self.backend, self.store, self.console = backend, store, console
        self.table: dict[str, dict[str, Any]] = {}

    def run(self, label: str, scenario: Any) -> dict[str, Any]:
        run_dir = _run(scenario, self.backend, self.console)
        cores, sent = load_rates(run_dir)
        verdict = json.loads((run_dir / "manifest.json").read_text())["fidelity"]["verdict"]
        self.table[label] = {**_peak(run_dir), "busy_cores": round(cores, 3),
                             "sent_mib_s": round(sent / 2**20, 3), "verdict": verdict, "dir": run_dir}
        return self.table[label]


SHARED = ("cpu_s_per_mib_sent", "copies_sent", "held_s", "node_cores_per_msg")  # measured locally, for every backend


def _measure_backend(backend: str, store: str, console: Console, say: Callable[[str], None],
                     shared: dict[str, Any]) -> dict[str, Any]:
    """One backend's entry. `shared`: on a backend other than local, local's SHARED figures (the same
    programs move the bytes and hold the messages)."""
    traffic = {k: shared.get(k) for k in SHARED[:2]} if shared else {}
    per_msg: dict[str, float] = dict(shared.get("node_cores_per_msg") or {}) if shared else {}
    runs = _Runs(backend, store, console)
    lo, hi = BASE["peerlab/gossipsub"] if backend == "local" else DOCKER_BASE
    small = {n: runs.run(f"peerlab/gossipsub x{n}", _scenario("peerlab/gossipsub", n, store)) for n in (lo, hi)}
    if backend == "local":
        medium = runs.run(f"peerlab/gossipsub x{hi}, {MEDIUM[0]} at {MEDIUM[2]}/s",
                          _scenario("peerlab/gossipsub", hi, store, MEDIUM))
        traffic = traffic_cpu(small[hi]["dir"], medium["dir"], hi)
        say(f"{backend}: {MEDIUM[0]} messages at {MEDIUM[2]}/s against {SMALL[0]}: {traffic['cpu_s_per_mib_sent']} "
            f"CPU s per MiB sent, {traffic['copies_sent']} copies sent per byte published per node")
    per_mib = traffic.get("cpu_s_per_mib_sent") or 0.0

    def node_work(r: dict[str, Any]) -> float:  # busy cores less what moving its bytes cost
        return r["busy_cores"] - r["sent_mib_s"] * per_mib

    def per_message(kind: str, n: int, fast: dict[str, Any]) -> None:  # (local) the same kind at SLOW's rate
        slow = runs.run(f"{kind} x{n}, {SLOW[0]} at {SLOW[2]}/s", _scenario(kind, n, store, SLOW))
        per_msg[kind] = round(max(0.0, (node_work(fast) - node_work(slow)) / n / (SMALL[2] - SLOW[2])), 5)
        say(f"{backend}: {kind} at {SMALL[2]}/s against {SLOW[2]}/s: {per_msg[kind]} cores per node per "
            "message per second")

    mib = {"peerlab/gossipsub": round((small[hi]["peak_mib"] - small[lo]["peak_mib"]) / (hi - lo), 2)}
    cpu = {"peerlab/gossipsub": round((node_work(small[hi]) - node_work(small[lo])) / (hi - lo), 4)}
    fixed = round(small[lo]["peak_mib"] - lo * mib["peerlab/gossipsub"], 1)
    fixed_cpu = round(max(0.0, node_work(small[lo]) - lo * cpu["peerlab/gossipsub"]), 3)
    if backend == "local":
        per_message("peerlab/gossipsub", hi, small[hi])
    say(f"{backend}: GossipSub {lo} and {hi} nodes: fixed {fixed} MiB and {fixed_cpu} cores, per node "
        f"{mib['peerlab/gossipsub']} MiB and {cpu['peerlab/gossipsub']} cores")
    for kind in OTHERS:
        if backend == "docker" and kind.startswith("peerlab/") and kind != "peerlab/floodsub":
            continue  # on docker a peerlab node is the same process in a container: floodsub says enough
        scenario = _scenario(kind, ONE_COUNT[backend], store)
        n = scenario.nodes.count
        if kind_of(scenario) != kind:
            raise RuntimeError(f"{scenario.name}: its nodes are {kind_of(scenario)}, not {kind}")
        r = runs.run(f"{kind} x{n}", scenario)
        mib[kind] = round((r["without_probes_mib"] - fixed) / n, 2)
        cpu[kind] = round(max(0.0, node_work(r) - fixed_cpu) / n, 4)
        if backend == "local" and kind not in CONTENT_BASED:
            per_message(kind, n, r)
        say(f"{backend}: {kind} {n} nodes {r['peak_mib']} MiB, {r['busy_cores']} cores busy ({r['verdict']}): "
            f"{mib[kind]} MiB and {cpu[kind]} cores per node")
    # a node's cores at SMALL's rate less its messages' share: what it costs idle
    cpu = {k: round(max(0.0, c - per_msg.get(k, 0.0) * SMALL[2]), 4) for k, c in cpu.items()}
    probes = [r["probes_at_peak"] for r in runs.table.values() if r["probes_at_peak"]["processes"]]
    if not probes:
        raise RuntimeError(f"{backend}: no adapter run's peak held a probe process; their cost is unmeasured")
    probe_mib = round(sum(p["mib"] for p in probes) / sum(p["processes"] for p in probes), 2)
    say(f"{backend}: a probe process beside an adapter node: {probe_mib} MiB")
    entry: dict[str, Any] = {"measured": datetime.date.today().isoformat(), "fixed_mib": fixed, "node_mib": mib,
                             "probe_mib": probe_mib, "fixed_cores": fixed_cpu, "node_cores": cpu,
                             "node_cores_per_msg": per_msg, **traffic}
    if backend == "local":
        large = runs.run(f"peerlab/gossipsub x{hi}, {LARGE[0]} at {LARGE[2]}/s",
                         _scenario("peerlab/gossipsub", hi, store, LARGE))
        per_second = LARGE[1] * LARGE[2] - SMALL[1] * SMALL[2]  # bytes published per second, network-wide
        entry["held_s"] = round(max(0.0, (large["peak_mib"] - small[hi]["peak_mib"]) * 2**20 / hi / per_second), 2)
        say(f"{backend}: {LARGE[0]} messages at {LARGE[2]}/s against {SMALL[0]} at {SMALL[2]}/s: {large['peak_mib']} "
            f"against {small[hi]['peak_mib']} MiB ({large['verdict']}), each node holds {entry['held_s']} s of what "
            "is published")
    else:
        entry["held_s"] = shared.get("held_s")
    entry["runs"] = {label: {k: v for k, v in r.items() if k != "dir"} for label, r in runs.table.items()}
    return entry
