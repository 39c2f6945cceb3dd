"""`peerlab bench`: benchmarks that print figures."""
from __future__ import annotations

import argparse
import os

from orchestrator.cli.common import UsageError, add_command, err, said

TARGETS = {
    "local": "how many nodes the local backend runs (floodsub).",
    "gossipsub": "a GossipSub scenario (--scenario, default scenarios/gossipsub-large.yaml) at each --nodes "
                 "count, and the largest with delivery 1.0; with scenarios/gossipsub-implementations.yaml and "
                 "--set implementation=go-libp2p (rust-libp2p, js-libp2p, py-libp2p), that implementation's.",
    "router": "GossipSub CPU per relayed message, at each of --sizes.",
    "topiary-sweep": "Topiary parameters (--matrix) on the in-memory network against random-overlay.",
    "sim": "the simulation's memory per node and per frame in flight, and its speed on each --sim-scenario "
           "(default scenarios/sim-gossipsub-1000.yaml).",
    "analysis": "the core metrics of --events synthetic events with Spark and with DuckDB (last line "
                "spark_s=... duckdb_s=... ratio=...).",
    "soak": "one long local GossipSub run (--duration, default 30m; --nodes, default 20) with churn and a "
            "partition every 5 minutes (a soak under 4 minutes: one, a quarter of the way in), printing the orchestrator's RSS and descriptors, the run's namespaces "
            "and processes every --every, and the run's accounting at the end.",
    "admission": "what a node costs in memory and CPU on each of --backends (default local,docker): peerlab's "
                 "GossipSub at two node counts (the run's fixed cost and the cost per node), each other protocol and "
                 "each libp2p implementation at one, GossipSub's medium messages against small ones (CPU per MiB "
                 "sent, copies sent per byte published) and large ones (how many seconds of what is published a "
                 "node holds); writes orchestrator/run/admission_costs.json, the table admission reads, keeping "
                 "the entries of backends not measured (about 27 minutes for both backends on 2 cores).",
    "delayline": "the delay line alone: --senders namespaces (default 4) with an HTB uplink at --bandwidth (default "
                 "50mbit) write a --message-size message (default 200KB) on each of --streams connections at once "
                 "(default 8), round after round, to --receivers namespaces (default 2) through a one-way --delay "
                 "(default 100ms) for --duration (default 15s); prints packets per second through the line, the "
                 "share released 10 ms or more late, the RTT under load against the configured one, and goodput.",
}


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "bench", help="benchmarks that print figures (local scale, GossipSub scale and CPU, "
                                       "simulation speed and memory)",
                    description="\n\n".join(f"{name}: {what}" for name, what in TARGETS.items()),
                    examples=["peerlab bench router --sizes 1KiB,1MiB",
                              "peerlab bench gossipsub --nodes 50,100 --duration 30s",
                              "peerlab bench sim", "peerlab bench analysis --events 1000000",
                              "peerlab bench soak --duration 10m --every 30s",
                              "peerlab bench delayline --duration 15s",
                              "peerlab bench admission --backends local"])
    p.add_argument("target", choices=list(TARGETS), help="what to measure (above)")
    p.add_argument("--sim-scenario", dest="scenarios", action="append", default=[], metavar="FILE",
                   help="sim: a scenario to simulate (repeat for several)")
    p.add_argument("--scenario", help="gossipsub: the scenario (default scenarios/gossipsub-large.yaml); "
                                      "topiary-sweep: the scenario (default scenarios/topiary-vs-random.yaml)")
    p.add_argument("--matrix", action="append", default=[], metavar="PATH=V1,V2",
                   help="topiary-sweep: values to sweep, e.g. --matrix protocol.params.w_d=1,10,100")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="gossipsub, sim: override a field of the scenario, e.g. --set gossipsub.variant=all-3")
    p.add_argument("--sizes", default="1KiB,1MiB", help="router: message sizes (default 1KiB,1MiB)")
    p.add_argument("--messages", type=int, default=2000, help="router: messages relayed per size")
    p.add_argument("--nodes", help="comma-separated sizes (default 50,100,200; soak: 20)")
    p.add_argument("--duration", help="publishing window per size (default 60s; soak: the whole run, default 30m)")
    p.add_argument("--every", default="60s", help="soak: how often to sample (default 60s)")
    p.add_argument("--rate", type=float, default=2.0, help="soak: messages per second, network-wide (default 2)")
    p.add_argument("--senders", type=int, default=4, help="delayline: sending namespaces (default 4)")
    p.add_argument("--receivers", type=int, default=2, help="delayline: receiving namespaces (default 2)")
    p.add_argument("--streams", type=int, default=8, help="delayline: connections per sender (default 8)")
    p.add_argument("--bandwidth", default="50mbit", help="delayline: each sender's uplink (default 50mbit)")
    p.add_argument("--delay", default="100ms", help="delayline: one-way delay between any two (default 100ms)")
    p.add_argument("--message-size", default="200KB", help="delayline: bytes per message (default 200KB)")
    p.add_argument("--backends", default="local,docker", help="admission: the backends to measure (default local,docker)")
    p.add_argument("--store", default="file://./runs", help="where the benchmark runs are kept")
    p.add_argument("--events", type=int, default=10_000_000, help="analysis: synthetic events (default 10000000)")
    p.add_argument("--master", default="local[*]",
                   help="analysis: Spark master (default local[*]; spark://host:7077 for a cluster)")
    p.add_argument("--workdir", help="analysis: where the synthetic tables go (default a temporary directory)")
    p.add_argument("--keep", action="store_true", help="analysis: keep the synthetic tables afterwards")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from orchestrator.model.units import parse_duration, parse_size

    if args.target == "router":
        from orchestrator.tools.bench_runs import bench_router

        try:
            sizes = [parse_size(x) for x in args.sizes.split(",")]
        except ValueError as e:
            raise UsageError(f"--sizes: {e}")
        bench_router(sizes, args.messages)
        return 0
    if args.target == "sim":
        from orchestrator.tools.bench_sim import bench_sim

        bench_sim(args.scenarios or ["scenarios/sim-gossipsub-1000.yaml"], args.overrides, err)
        return 0
    if args.target == "analysis":
        from analysis.engine_bench import bench_analysis

        if args.events < 1:
            raise UsageError("--events must be at least 1")
        return bench_analysis(args.events, args.master, args.workdir, args.keep, err)
    if args.target == "topiary-sweep":
        from orchestrator.tools.bench_runs import bench_topiary_sweep

        bench_topiary_sweep(args.scenario or "scenarios/topiary-vs-random.yaml", args.overrides, args.matrix, err)
        return 0

    if os.geteuid() != 0:
        err.print(f"[bold red]error:[/] the {args.target} benchmark needs root (it runs on the local backend)")
        return 1
    if args.target == "admission":
        from orchestrator.run.admission import CHECKED_BACKENDS
        from orchestrator.tools.bench_admission import bench_admission

        backends = [b for b in args.backends.split(",") if b]
        unknown = [b for b in backends if b not in CHECKED_BACKENDS]
        if unknown or not backends:
            raise UsageError(f"--backends: {','.join(unknown) or '(none)'}: admission measures "
                             f"{' and '.join(CHECKED_BACKENDS)}")
        bench_admission(backends, args.store, err)
        return 0
    if args.target == "delayline":
        from orchestrator.model.units import parse_bandwidth
        from orchestrator.tools.bench_delayline import bench_delayline

        try:
            rate, delay = parse_bandwidth(args.bandwidth), parse_duration(args.delay) * 1000
            size, duration = parse_size(args.message_size), parse_duration(args.duration or "15s")
        except ValueError as e:
            raise UsageError(f"--bandwidth, --delay, --message-size, --duration: {e}")
        if args.senders < 1 or args.receivers < 2:
            raise UsageError("delayline: at least 1 sender and 2 receivers (the round trip is timed between two)")
        result = bench_delayline(args.senders, args.receivers, rate, delay, args.streams, size, duration,
                                 say=lambda m: print(m, flush=True))
        return 0 if not result["errors"] else 1
    try:
        sizes = [int(x) for x in (args.nodes or ("20" if args.target == "soak" else "50,100,200")).split(",")]
        duration = parse_duration(args.duration or ("30m" if args.target == "soak" else "60s"))
        every = parse_duration(args.every)
    except ValueError as e:
        raise UsageError(f"--nodes takes a comma-separated list of counts, --duration and --every a time like 60s ({e})")
    if args.target == "soak":
        from orchestrator.tools.bench_soak import bench_soak, problems

        if len(sizes) != 1 or sizes[0] < 4:
            raise UsageError("soak: --nodes is one count, at least 4")
        result = bench_soak(duration, every, sizes[0], args.rate, args.store, err)
        found = problems(result)
        for problem in found:
            err.print(f"[bold red]soak failed:[/] {said(problem)}", highlight=False)
        return 1 if found else 0
    if args.target == "gossipsub":
        from orchestrator.tools.bench_runs import bench_gossipsub

        bench_gossipsub(sizes, args.overrides, args.store, err, args.scenario or "scenarios/gossipsub-large.yaml")
        return 0
    from orchestrator.tools.bench_runs import bench_local

    bench_local(sizes, duration, args.store, err)
    return 0
