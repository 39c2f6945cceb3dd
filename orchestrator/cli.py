"""The `peerlab` command line.

Exit codes: 0 success, 1 the run failed (the message names the node), 2 the input is invalid
(nothing was touched), 130 interrupted (everything torn down).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

EXAMPLES = """\
examples:
  peerlab run scenarios/quickstart.yaml
  peerlab run scenarios/quickstart.yaml --set nodes.count=10 --set network.latency.one_way=20ms
  peerlab validate my-scenario.yaml
  peerlab plan scenarios/quickstart.yaml --seed 7
  peerlab report runs/20261121-120000-quickstart-1a2b3c
  peerlab run scenarios/sim-gossipsub-1000.yaml --backend sim   # 1000 nodes in virtual time
  peerlab run scenarios/gossipsub-large.yaml --matrix gossipsub.variant=v1.1,v1.2,all-3
                           # one run per variant, then one comparison table
  peerlab compare runs/A runs/B      # metrics side by side
  peerlab overlay --compare --nodes 1000 --runs 10   # the CD-MAX seed's overlay tables
  peerlab clean            # remove what a crashed run left behind
  peerlab doctor           # what this machine can run

scenario reference: `peerlab schema` prints the JSON Schema (point your editor's YAML plugin at it);
docs/scenarios.md walks through every section, docs/reference/scenario.md lists every field.
"""

err = Console(stderr=True, soft_wrap=True)


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a field, e.g. --set nodes.count=10 (repeatable; values read as YAML)")
    p.add_argument("--matrix", dest="matrix", action="append", default=[], metavar="PATH=V1,V2,...",
                   help="one run per value (repeatable: the cartesian product), added to the scenario's "
                        "own matrix: block, e.g. --matrix gossipsub.variant=v1.1,v1.2")


def _load(args: argparse.Namespace):
    """The scenario's combinations (one, unless it or the command line has a matrix)."""
    from orchestrator.model.matrix import expand

    return expand(args.scenario, args.overrides, args.matrix)


def cmd_validate(args: argparse.Namespace) -> int:
    for combo in _load(args):
        sc = combo.scenario
        print(f"ok: {args.scenario}{f' [{combo.label}]' if combo.label else ''}: scenario {sc.name!r}, "
              f"{sc.nodes.count} nodes, protocol {sc.protocol.name}, {sc.topics.count} topics, "
              f"latency model {sc.network.latency.model}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from orchestrator.model.scenario import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
        err.print(f"wrote {args.output}")
    else:
        print(text)
    return 0


def _fault_target(f: Any) -> str:
    if f.action == "partition":
        return " | ".join(f"{len(g)} nodes ({', '.join(g[:3])}{', ...' if len(g) > 3 else ''})" for g in f.groups)
    if f.action == "degrade":
        parts = [f"+{f.delay_ms:g} ms" if f.delay_ms else "", f"loss {f.loss:g}" if f.loss else "",
                 f"{f.bandwidth / 1e6:g} Mbit/s" if f.bandwidth else ""]
        return f"{f.node}: " + ", ".join(p for p in parts if p)
    return f.node


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.model.plan import make_plan

    combos = _load(args)
    if len(combos) > 1:
        raise _UsageError(f"{args.scenario} expands to {len(combos)} combinations; plan shows one: pin the "
                          "matrix with --set (e.g. --set " + combos[0].overrides[0] + ")")
    plan = make_plan(combos[0].scenario, args.seed)
    if args.json:
        print(plan.model_dump_json(indent=1))
        return 0
    degrees = [len(n.neighbours) for n in plan.nodes]
    subs = [len(n.subscriptions) for n in plan.nodes]
    print(f"scenario {plan.scenario}, seed {plan.seed}: {len(plan.nodes)} nodes, protocol {plan.protocol}")
    print(f"  neighbours per node: min {min(degrees)}, max {max(degrees)}")
    print(f"  topics: {len(plan.topics)}; subscriptions per node: min {min(subs)}, max {max(subs)}")
    print(f"  publishes: {plan.publishes()} by {sum(1 for n in plan.nodes if n.schedule)} publishers; "
          f"run length {plan.end:g}s after T0")
    print(f"  faults: {len(plan.faults)}" + "".join(f"\n    T0+{f.at:g}s {f.action} {_fault_target(f)}"
                                                 for f in plan.faults))
    absent = [n.id for n in plan.nodes if n.absent]
    if absent:
        print(f"  absent at T0 (join later, or churn reserve): {', '.join(absent)}")
    return 0


def _summary(metrics: dict[str, Any]) -> str:
    lat = metrics["latency_ms"]
    b = metrics["bytes"]

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1f} ms"
    ratio = metrics["delivery_ratio"]
    return (f"delivery {'n/a' if ratio is None else f'{ratio:.4f}'} over {metrics['messages']} messages; "
            f"latency p50 {ms(lat['p50'])}, p99 {ms(lat['p99'])}; "
            f"sent {b['data_sent'] / 1e6:.2f} MB data, {b['control_sent'] / 1e6:.2f} MB control")


def _key_values(items: list[str], option: str, example: str) -> dict[str, str]:
    """KEY=VALUE options (repeatable) as a dict; a usage error naming the option otherwise."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _UsageError(f"{option} {item!r}: write KEY=VALUE, e.g. {option} {example}")
        out[key] = value
    return out


def _report(run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from analysis.job import analyse
    from analysis.spark import get_spark

    conf = _key_values(args.spark_conf, "--spark-conf", "spark.executor.memory=4g")
    err.print(f"[bold cyan]analysis:[/] PySpark ({args.master}) on {run_dir}")
    return analyse(run_dir, get_spark(args.master, conf=conf))


def _spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default="local[*]",
                   help="Spark master for the analysis: local[*] (default, this machine's cores), local[N], "
                        "or a cluster such as spark://host:7077 (see docs/analysis.md, 'At scale')")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting (repeatable), e.g. spark.executor.memory=8g, or the s3a settings "
                        "of docs/analysis.md")


def cmd_run(args: argparse.Namespace) -> int:
    combos = _load(args)  # invalid input (in any combination) stops here, before anything is created
    from orchestrator.backends import BACKENDS

    known = [*BACKENDS, "sim"]
    if args.backend not in known:
        raise _UsageError(f"--backend {args.backend!r}: available backends are {', '.join(known)}")
    for option, env in (("namespace", "PEERLAB_K8S_NAMESPACE"), ("kube_context", "PEERLAB_K8S_CONTEXT"),
                        ("image", "PEERLAB_IMAGE")):
        if getattr(args, option, None):
            os.environ[env] = getattr(args, option)
    if args.backend not in ("sim", "kubernetes") and os.geteuid() != 0:
        err.print(f"[bold red]error:[/] the {args.backend} backend creates network namespaces or containers and tc "
                  "qdiscs: run peerlab as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN), or simulate with --backend sim")
        return 1
    from orchestrator.run.runner import RunError, RunInterrupted, Runner
    from orchestrator.sim.backend import SimInterrupted, SimRunner

    done: list[Path] = []
    for i, combo in enumerate(combos, 1):
        if combo.label:
            err.print(f"[bold magenta]matrix {i}/{len(combos)}:[/] {combo.label}")
        runner: Runner | SimRunner
        if args.backend == "sim":
            runner = SimRunner(combo.scenario, seed=args.seed, console=err, label=combo.label)
        else:
            try:
                runner = Runner(combo.scenario, backend=args.backend, seed=args.seed, console=err,
                                shaping_mode=args.shaping, label=combo.label)
            except RuntimeError as e:  # the backend cannot start (no Docker engine, image build failed)
                err.print(f"[bold red]error:[/] {e}")
                return 1
        try:
            run_dir = runner.run()
        except RunError as e:
            err.print(f"[bold red]run failed:[/] {e}")
            print(runner.run_dir)
            return 1
        except (RunInterrupted, SimInterrupted) as e:
            err.print(f"[bold yellow]interrupted:[/] {e}")
            print(runner.run_dir)
            return 130
        if not args.no_report:
            metrics = _report(run_dir, args)
            err.print(f"[bold green]summary:[/] {_summary(metrics)}")
            err.print(f"report: {run_dir / 'analysis' / 'report.html'}")
            _upload(runner.store, runner.run_id)
        print(run_dir)
        done.append(run_dir)
    if len(done) > 1 and not args.no_report:
        from analysis.compare import load_rows, render_table

        err.print("[bold green]comparison[/] (again with: peerlab compare " + " ".join(map(str, done)) + ")")
        err.print(render_table(load_rows(done)), markup=False, highlight=False)
    return 0


def _upload(store: Any, run_id: str) -> None:
    uploaded = store.sync(run_id)
    if uploaded:
        err.print(f"uploaded {uploaded} files to {store.url}/{run_id}")


def cmd_image(args: argparse.Namespace) -> int:
    from orchestrator.backends.docker import docker_client
    from orchestrator.tools import image

    base = args.base_image or image.base_image()
    if args.tag_only:
        print(image.image_tag(base))
        return 0
    try:
        print(image.build(docker_client(), base, say=lambda m: err.print(m, markup=False, highlight=False)))
    except RuntimeError as e:
        err.print(f"[bold red]error:[/] {e}", markup=False)
        return 1
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from orchestrator.tools.prepare import prepare

    extravars = _key_values(args.extra, "-e", "peerlab_install_docker=false")
    rc, stats = prepare(args.playbook, check=args.check, extravars=extravars)
    if rc != 0:
        err.print(f"[bold red]error:[/] playbooks/{args.playbook}.yml failed (exit {rc}); see the task above")
    return 0 if rc == 0 else 1


def cmd_report(args: argparse.Namespace) -> int:
    store = None
    if "://" in args.run_dir and not args.run_dir.startswith("file://"):
        from orchestrator.store import split_run_url

        try:
            store, run_id = split_run_url(args.run_dir)
            err.print(f"fetching {args.run_dir} into {store.root}")
            run_dir = store.fetch(run_id)
        except (ValueError, FileNotFoundError) as e:
            raise _UsageError(str(e)) from None
    else:
        run_dir = Path(args.run_dir.removeprefix("file://"))
    if not (run_dir / "manifest.json").exists():
        raise _UsageError(f"{run_dir}: not a run directory (no manifest.json)")
    metrics = _report(run_dir, args)
    if store is not None:
        _upload(store, run_id)
    err.print(f"[bold green]summary:[/] {_summary(metrics)}")
    print(run_dir / "analysis" / "report.html")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import distribution_plots, epoch_plots, load_rows, render_csv, render_html, render_table

    try:
        rows = load_rows(args.run_dirs)
    except FileNotFoundError as e:
        raise _UsageError(str(e))
    if args.html:
        plots = {**distribution_plots(args.run_dirs), **epoch_plots(args.run_dirs)}
        Path(args.html).write_text(render_html(rows, plots))
        err.print(f"wrote {args.html} ({len(plots)} overlaid plots)")
    if args.format == "json":
        print(json.dumps(rows, indent=1))
    elif args.format == "csv":
        print(render_csv(rows), end="")
    else:
        print(render_table(rows))
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from orchestrator.backends.docker import docker_leftovers, remove_docker_objects
    from orchestrator.run.cleanup import find_runs, forget_run, mark_status, remove_run_objects

    if os.geteuid() != 0:
        err.print("[bold red]error:[/] cleaning namespaces needs root")
        return 1
    found = 0
    runs = find_runs()
    in_docker = docker_leftovers()  # containers, networks, volumes of docker-backend runs
    runs += [(None, short, False) for short in sorted(in_docker - {short for _, short, _ in runs})]
    for state, short, alive in runs:
        if alive and not args.force:
            err.print(f"run {state.run_id if state else short}: orchestrator (pid {state.pid}) still running; "
                      "left alone (use --force to clean it anyway)")
            continue
        removed = remove_run_objects(short, state.scratch if state else None)
        if short in in_docker:
            docker = remove_docker_objects(short)
            err.print(f"run {short}: removed {docker['containers']} containers, {docker['networks']} networks, "
                      f"{docker['volumes']} volumes")
        if state:
            mark_status(state.run_dir, "crashed", "orchestrator died; cleaned by `peerlab clean`")
        forget_run(short)
        found += 1
        err.print(f"run {state.run_id if state else 'pl' + short + '-* (no state file)'}: "
                  f"killed {removed['processes']} processes, removed {removed['namespaces']} namespaces")
    if not found:
        err.print("nothing to clean")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from orchestrator.model.units import parse_duration, parse_size

    if args.target == "router":
        from orchestrator.tools.bench import bench_router

        try:
            sizes = [parse_size(x) for x in args.sizes.split(",")]
        except ValueError as e:
            raise _UsageError(f"--sizes: {e}")
        bench_router(sizes, args.messages)
        return 0
    if args.target == "sim":
        from orchestrator.tools.bench_sim import bench_sim

        bench_sim(args.scenarios or ["scenarios/sim-gossipsub-1000.yaml"], args.overrides, err)
        return 0
    if args.target == "analysis":
        from analysis.bench import bench_analysis

        if args.events < 1:
            raise _UsageError("--events must be at least 1")
        return bench_analysis(args.events, args.master, args.workdir, args.keep, err)
    if args.target == "topiary-sweep":
        from orchestrator.tools.bench import bench_topiary_sweep

        bench_topiary_sweep(args.scenario, args.overrides, args.matrix, err)
        return 0

    if os.geteuid() != 0:
        err.print("[bold red]error:[/] the local benchmark needs root")
        return 1
    try:
        sizes = [int(x) for x in args.nodes.split(",")]
        duration = parse_duration(args.duration)
    except ValueError as e:
        raise _UsageError(f"--nodes takes a comma-separated list of counts, --duration a time like 60s ({e})")
    if args.target == "gossipsub":
        from orchestrator.tools.bench import bench_gossipsub

        bench_gossipsub(sizes, args.overrides, args.store, err)
        return 0
    from orchestrator.tools.bench import bench_local

    bench_local(sizes, duration, args.store, err)
    return 0


def cmd_overlay(args: argparse.Namespace) -> int:
    from orchestrator.model.overlays import ALGORITHMS
    from orchestrator.model.overlays.experiment import Workload, format_table, run_experiment, to_json

    algorithms = list(ALGORITHMS) if args.compare else [args.algorithm]
    if args.nodes > 1500 and "complete" in algorithms:
        algorithms.remove("complete")
        err.print("complete left out above 1500 nodes (it is every pair)")
    if args.interest is None and not 0 < args.subscriptions <= args.topics:
        raise _UsageError(f"--subscriptions must be between 1 and --topics ({args.topics})")
    if args.interest is not None and not 0 < args.interest <= 1:
        raise _UsageError("--interest is a probability in (0, 1]")
    if args.nodes < 2 or args.topics < 1 or args.runs < 1:
        raise _UsageError("--nodes >= 2, --topics >= 1 and --runs >= 1")
    wl = Workload(args.nodes, args.topics, args.subscriptions, args.zipf, args.interest)
    progress = (lambda text: err.print(text)) if args.verbose else None
    results = run_experiment(algorithms, wl, args.runs, args.seed, args.degree, args.diameter, progress)
    if args.json:
        print(json.dumps(to_json(results), indent=1))
    else:
        print(format_table(results))
    return 0


def cmd_fuzz(args: argparse.Namespace) -> int:
    from node import fuzz

    engine = args.engine
    if engine == "auto":
        engine = "atheris" if fuzz.have_atheris() else "hypothesis"
    elif engine == "atheris" and not fuzz.have_atheris():
        raise _UsageError("atheris is not installed (pip install atheris; it needs a manylinux x86_64 or "
                          "aarch64 wheel or clang); use --engine hypothesis")
    names = args.decoders or fuzz.targets()
    unknown = [n for n in names if n not in fuzz.targets()]
    if unknown:
        raise _UsageError(f"unknown decoder {unknown[0]!r}; known: {', '.join(fuzz.targets())}")
    total = 0
    for name in names:
        err.print(f"fuzzing {name}: {args.frames:,} frames with {engine} ...")
        proc = subprocess.run([sys.executable, "-m", "node.fuzz", name, str(args.frames), engine],
                              capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("decoder=")), None)
        if line is None:  # the fuzzer itself died: that counts as a crash, with its output
            line = f"decoder={name} frames=0 crashes=1 engine={engine}"
            err.print(proc.stderr[-2000:], markup=False, highlight=False)
        elif " crashes=0 " not in line + " ":
            err.print(proc.stderr[-4000:], markup=False, highlight=False)
        print(line, flush=True)
        total += int(line.split("crashes=")[1].split()[0])
    err.print(f"{len(names)} decoders, {total} crashes")
    return 1 if total else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from orchestrator.tools.doctor import checks, summary

    rows = checks()
    for r in rows:
        mark = "[green]ok[/]  " if r["ok"] else "[red]no[/]  "
        err.print(f"{mark}{r['what']}: {r['detail']}")
    for line in summary(rows):
        print(line)
    return 0


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="peerlab", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES,
        description="Emulation testbed for peer-to-peer publish/subscribe protocols: real nodes in "
                    "network namespaces, every link shaped with tc, logs analysed with PySpark.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("run", help="validate, plan, deploy, run, collect, tear down, analyse",
                       description="Run a scenario end to end. Progress goes to stderr; the last line "
                                   "on stdout is the run directory.")
    _scenario_args(p)
    p.add_argument("--backend", default="local",
                   help="where nodes run: local (default; processes in network namespaces, real tc), docker "
                        "(one container per node, shaped by the same tc code; builds the node image when it "
                        "changed, from $PEERLAB_BASE_IMAGE or python:3.12-slim), kubernetes (one pod per node "
                        "of charts/peerlab in the cluster of your kubeconfig; load the image first: peerlab "
                        "image build, kind load docker-image), or sim (the same protocol cores in virtual "
                        "time, one process, no root; for paper-scale runs)")
    k8s = p.add_argument_group("kubernetes backend")
    k8s.add_argument("--namespace", help="namespace of the run's release (default $PEERLAB_K8S_NAMESPACE or "
                                         "peerlab; created when missing)")
    k8s.add_argument("--kube-context", help="kubeconfig context (default: the current one; $PEERLAB_K8S_CONTEXT)")
    k8s.add_argument("--image", help="node image the pods run (default: $PEERLAB_IMAGE, else the content tag "
                                     "`peerlab image build --tag-only` prints)")
    p.add_argument("--seed", type=int, help="override the scenario's seed (same seed => same plan)")
    p.add_argument("--shaping", choices=["auto", "netem", "transport"], default="auto",
                   help="latency in the kernel (netem) or in the node transport; auto probes the kernel")
    p.add_argument("--no-report", action="store_true", help="skip the PySpark analysis (run `peerlab report` later)")
    _spark_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a scenario and exit (2 if invalid)")
    _scenario_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", help="show the plan a scenario and seed give, without running it")
    _scenario_args(p)
    p.add_argument("--seed", type=int)
    p.add_argument("--json", action="store_true", help="print the whole RunPlan as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    p.add_argument("--output", "-o", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("image", help="build the node image (node/Dockerfile) for the docker and kubernetes backends",
                       description="Build the node image with the local Docker engine, tagged by its content "
                                   "(peerlab-node:<hash of node/ and the shaper>); prints the tag. The docker "
                                   "backend does this by itself when the tag is missing.")
    p.add_argument("action", choices=["build"])
    p.add_argument("--base-image", help="the image to build FROM (default: $PEERLAB_BASE_IMAGE or python:3.12-slim; "
                                        "without a registry: .ci/docker-base builds peerlab-base:bookworm)")
    p.add_argument("--tag-only", action="store_true", help="print the tag the image would have; build nothing")
    p.set_defaults(func=cmd_image)

    from orchestrator.tools.prepare import PLAYBOOKS

    p = sub.add_parser("prepare", help="prepare this machine with an Ansible playbook (host, kind, storage)",
                       description="Run one of playbooks/*.yml against localhost through ansible-runner: "
                                   "host (tc modules where the kernel has them, sysctls and limits for many "
                                   "nodes, Docker), kind (a multi-node kind cluster with the node image), "
                                   "storage (an S3 bucket for run logs). Other hosts: ansible-playbook -i "
                                   "INVENTORY playbooks/NAME.yml.")
    p.add_argument("playbook", choices=sorted(PLAYBOOKS))
    p.add_argument("--check", action="store_true", help="Ansible check mode: show what would change, change nothing")
    p.add_argument("-e", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                   help="a playbook variable (repeatable), e.g. -e peerlab_image=peerlab-node:<tag>")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("report", help="(re)run the analysis of a run directory",
                       description="Analyse a run: a local run directory, or a run in an s3:// store, which "
                                   "is fetched into the cache ($PEERLAB_CACHE or ~/.cache/peerlab), analysed "
                                   "there, and its analysis/ uploaded back.")
    p.add_argument("run_dir", metavar="RUN", help="a run directory, or s3://BUCKET/PREFIX/RUN_ID")
    _spark_options(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="metrics of several runs side by side")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained page with the table and the runs' "
                                                "curves overlaid: latency CDF, coverage and upload over time, and "
                                                "per-epoch curves (overlay protocols: receive rate, delay, victim "
                                                "topic, attackers' slot share)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("clean", help="remove namespaces and processes left by crashed runs")
    p.add_argument("--force", action="store_true", help="also clean runs whose orchestrator is alive")
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser("bench", help="benchmarks that print figures (local scale, GossipSub scale and CPU, "
                                     "simulation speed and memory)")
    p.add_argument("target", choices=["local", "gossipsub", "router", "topiary-sweep", "sim", "analysis"],
                   help="local: how many nodes the local backend runs (floodsub); gossipsub: "
                        "scenarios/gossipsub-large.yaml at each --nodes count, and the largest with "
                        "delivery 1.0; router: GossipSub CPU per relayed message; topiary-sweep: "
                        "Topiary parameters (--matrix) on the in-memory network against random-overlay; sim: "
                        "the simulation's memory per node and per frame in flight, and its speed on each "
                        "--sim-scenario (default scenarios/sim-gossipsub-1000.yaml); analysis: the core "
                        "metrics of --events synthetic events with Spark and with DuckDB (last line "
                        "spark_s=... duckdb_s=... ratio=...)")
    p.add_argument("--sim-scenario", dest="scenarios", action="append", default=[], metavar="FILE",
                   help="sim: a scenario to simulate (repeat for several)")
    p.add_argument("--scenario", default="scenarios/topiary-vs-random.yaml", help="topiary-sweep: the scenario")
    p.add_argument("--matrix", action="append", default=[], metavar="PATH=V1,V2",
                   help="topiary-sweep: values to sweep, e.g. --matrix protocol.params.w_d=1,10,100")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="gossipsub, sim: override a field of the scenario, e.g. --set gossipsub.variant=all-3")
    p.add_argument("--sizes", default="1KiB,1MiB", help="router: message sizes (default 1KiB,1MiB)")
    p.add_argument("--messages", type=int, default=2000, help="router: messages relayed per size")
    p.add_argument("--nodes", default="50,100,200", help="comma-separated sizes (default 50,100,200)")
    p.add_argument("--duration", default="60s", help="publishing window per size (default 60s)")
    p.add_argument("--store", default="file://./runs", help="where the benchmark runs are kept")
    p.add_argument("--events", type=int, default=10_000_000, help="analysis: synthetic events (default 10000000)")
    p.add_argument("--master", default="local[*]",
                   help="analysis: Spark master (default local[*]; spark://host:7077 for a cluster)")
    p.add_argument("--workdir", help="analysis: where the synthetic tables go (default a temporary directory)")
    p.add_argument("--keep", action="store_true", help="analysis: keep the synthetic tables afterwards")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "overlay", help="build topic-connected overlays (GM, CD-ODA..., CD-MAX-Ref) and report degrees",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build overlays on R random workloads and report mean and 95%% confidence interval "
                    "of average and maximum degree, edges, connected topics and construction time, as "
                    "the CD-MAX seed's tables do.",
        epilog="examples:\n  peerlab overlay --algorithm cd-max-ref --nodes 1000 --topics 100 "
               "--subscriptions 10 --runs 10\n  peerlab overlay --compare --nodes 200 --json")
    p.add_argument("--algorithm", "-a", default="cd-max-ref", choices=sorted(__import__(
        "orchestrator.model.overlays", fromlist=["ALGORITHMS"]).ALGORITHMS))
    p.add_argument("--compare", action="store_true", help="run every algorithm on the same workloads")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--subscriptions", type=int, default=10, help="topics per node (Zipf model)")
    p.add_argument("--zipf", type=float, default=0.5, help="Zipf exponent of topic popularity")
    p.add_argument("--interest", type=float, help="uniform interest rate instead of Zipf (Topiary's model)")
    p.add_argument("--degree", type=int, default=8, help="random and degree-split: outgoing links per node")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--diameter", action="store_true", help="also the largest per-topic diameter (slow)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", "-v", action="store_true", help="progress per run and algorithm")
    p.set_defaults(func=cmd_overlay)

    p = sub.add_parser(
        "fuzz", help="fuzz every wire decoder (framing, pubsub RPC, each protocol core) with malformed frames",
        description="Feed each decoder malformed frames (random bytes; valid frames truncated, bit-flipped, "
                    "spliced, with lying lengths) and count crashes: exceptions other than the decoder's "
                    "own refusal. One line per decoder: decoder=<name> frames=<n> crashes=<k>. Exit 1 if "
                    "any crashed (its first failing input and traceback go to stderr).")
    p.add_argument("--frames", type=int, default=100_000, help="inputs per decoder (default 100000)")
    p.add_argument("--decoder", dest="decoders", action="append", metavar="NAME",
                   help="only this one (repeat); names: frame, rpc, core:<protocol>")
    p.add_argument("--engine", choices=["auto", "atheris", "hypothesis"], default="auto",
                   help="auto: atheris (coverage-guided) if installed, else hypothesis")
    p.set_defaults(func=cmd_fuzz)

    p = sub.add_parser("doctor", help="what this machine offers: netns, htb, netem, java, docker, helm, a Kubernetes cluster")
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    from orchestrator.model.scenario import ScenarioError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as e:
        err.print(str(e), markup=False, highlight=False)
        return 2
    except _UsageError as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted: run torn down")
        return 130


if __name__ == "__main__":
    sys.exit(main())
