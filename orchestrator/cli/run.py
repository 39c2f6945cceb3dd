"""`peerlab run`: one scenario (or each combination of its matrix) end to end, on any backend."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from orchestrator.backends import SIMULATOR, TARGETS
from orchestrator.cli.common import (
    UsageError,
    add_command,
    dilated,
    err,
    fidelity,
    load,
    report,
    said,
    scenario_args,
    spark_options,
    summary,
    upload,
)
from orchestrator.cli.run_in_cluster import LOCAL_STORE_SECRET


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "run", help="validate, plan, deploy, run, collect, tear down, analyse",
                    description="Run a scenario end to end. Progress goes to stderr; the last line "
                                "on stdout is the run directory.",
                    examples=["peerlab run scenarios/quickstart.yaml",
                              "peerlab run scenarios/quickstart.yaml --set nodes.count=10 --seed 7",
                              "peerlab run scenarios/quickstart.yaml --backend docker",
                              "peerlab run scenarios/sim-gossipsub-1000.yaml --backend sim",
                              "peerlab run scenarios/gossipsub-publishers.yaml --dilate auto",
                              "peerlab run scenarios/quickstart.yaml --backend kubernetes --in-cluster",
                              "peerlab run scenarios/gossipsub-large.yaml --matrix gossipsub.variant=v1.1,v1.2"])
    scenario_args(p)
    p.add_argument("--backend", default="local",
                   help="where nodes run: local (default; processes in network namespaces, real tc), docker "
                        "(one container per node, shaped by the same tc code; builds the node image when it "
                        "changed, from $PEERLAB_BASE_IMAGE or python:3.12-slim), kubernetes (one pod per node "
                        "of charts/peerlab in the cluster of your kubeconfig; load the images first: peerlab "
                        "image build [--implementation all], kind load docker-image), or sim (the same protocol cores in virtual "
                        "time, one process, no root; for paper-scale runs)")
    k8s = p.add_argument_group("kubernetes backend")
    k8s.add_argument("--namespace", help="namespace of the run's release (default $PEERLAB_K8S_NAMESPACE or "
                                         "peerlab; created when missing)")
    k8s.add_argument("--kube-context", help="kubeconfig context (default: the current one; $PEERLAB_K8S_CONTEXT)")
    k8s.add_argument("--image", help="peerlab's node image the pods run (default: $PEERLAB_IMAGE, else the content tag "
                                     "`peerlab image build --tag-only` prints); an adapter's: "
                                     "$PEERLAB_IMAGE_JS_LIBP2P, $PEERLAB_IMAGE_PY_LIBP2P, else its content tag")
    k8s.add_argument("--in-cluster", action="store_true",
                     help="run the orchestrator itself in the cluster, as a Job of the chart (what `helm install "
                          "charts/peerlab --set-file scenario=...` makes): peerlab installs it, prints its log, "
                          "fetches the stored run and reports it here, and uninstalls it. Needs the orchestrator's "
                          "image in the cluster (peerlab image build --orchestrator; cluster up loads it) and an "
                          "s3:// output.store the cluster reaches (default on the local cluster: its bundled store)")
    k8s.add_argument("--store-secret", default=LOCAL_STORE_SECRET, metavar="NAME",
                     help="with --in-cluster: the Secret in the run's namespace holding the store client's AWS_* "
                          "settings for the Job (default peerlab-store, which cluster up makes)")
    p.add_argument("--seed", type=int, help="override the scenario's seed (same seed => same plan)")
    p.add_argument("--shaping", choices=["auto", "netem", "delayline", "transport"], default="auto",
                   help="where latency is applied: netem (the kernel's qdisc), delayline (NFQUEUE: every packet a "
                        "node receives held outside the node, for any implementation) or transport (peerlab's "
                        "node delays its own sends); auto: the scenario's network.shaping, whose own auto is "
                        "netem if the kernel has it, else delayline for every node (transport only when asked)")
    p.add_argument("--dilate", metavar="K|auto",
                   help="time dilation (docs/dilation.md): run K times slower than real time with a network K times "
                        "faster (latencies and timers x K, bandwidths / K), so each node has K times the CPU per "
                        "second of the experiment; times are reported in experiment time. Sets the scenario's "
                        "dilation; peerlab's own nodes only. auto: peerlab chooses K from this machine's CPU model "
                        "and runs again at a larger K (up to 3 runs, each kept) while the verdict says the CPU fell "
                        "behind; what a run whose CPU work undilated is past the faithful share of the cores gets when no "
                        "dilation is given anywhere (--dilate 1 runs it undilated; --force too past all the cores)")
    p.add_argument("--no-report", action="store_true", help="skip the PySpark analysis (run `peerlab report` later)")
    p.add_argument("--force", action="store_true",
                   help="run even if admission finds the run does not fit this machine (memory, CPU, file "
                        "descriptors, disk); the manifest records it")
    spark_options(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    if args.dilate not in (None, "auto"):
        try:
            float(args.dilate)
        except ValueError:
            raise UsageError(f"--dilate {args.dilate!r}: give a factor (1 or more, e.g. --dilate 4) or auto") from None
        args.overrides.append(f"dilation={args.dilate}")
    combos = load(args)  # invalid input (in any combination) stops here, before anything is created
    from orchestrator.backends import get_backend

    if args.backend not in TARGETS:
        raise UsageError(f"--backend {args.backend!r}: available backends are {', '.join(TARGETS)}")
    for option, env in (("namespace", "PEERLAB_K8S_NAMESPACE"), ("kube_context", "PEERLAB_K8S_CONTEXT"),
                        ("image", "PEERLAB_IMAGE")):
        if getattr(args, option, None):
            os.environ[env] = getattr(args, option)
    if args.in_cluster:
        if args.dilate == "auto":
            raise UsageError("--dilate auto runs again at a larger K from this machine, which --in-cluster leaves; "
                             "give --dilate K")
        from orchestrator.cli.run_in_cluster import run_in_cluster

        return run_in_cluster(args, combos)
    from orchestrator.run import auto_dilation
    from orchestrator.run.admission import AdmissionError, admit

    chosen: list[auto_dilation.Choice | None] = []
    admitted: list[dict] = []  # each combination's admission record, handed to its first run
    try:  # every combination, before the first one creates anything
        for i, combo in enumerate(combos):
            choice = None
            if auto_dilation.wanted(combo.scenario, args.backend, args.dilate):
                choice = auto_dilation.first_choice(combo.scenario, args.backend)
                combos[i] = combo = dilated(args, combo, choice.k)
            chosen.append(choice)
            admitted.append(admit(combo.scenario, args.backend, args.force))
    except AdmissionError as e:
        err.print("refused: " + str(e), style="bold red", markup=False, highlight=False)
        return 3
    if args.backend != SIMULATOR and get_backend(args.backend).needs_root and os.geteuid() != 0:
        err.print(f"[bold red]error:[/] the {args.backend} backend creates network namespaces or containers and tc "
                  "qdiscs: run peerlab as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN), or simulate with --backend sim")
        return 1
    from orchestrator.store import StoreError, open_store

    try:  # a store that cannot take the runs fails now, not after them
        for url in dict.fromkeys(combo.scenario.output.store for combo in combos):
            open_store(url).check()
    except StoreError as e:
        err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
        return 1
    done: list[Path] = []
    failed = False  # a node exited on its own in some run (the others go on)
    for i, (combo, choice, record) in enumerate(zip(combos, chosen, admitted), 1):
        if combo.label:
            err.print(f"[bold magenta]matrix {i}/{len(combos)}:[/] {said(combo.label)}")
        ran = _attempts(args, combo, choice, record)
        if isinstance(ran, int):
            return ran
        runner, run_dir = ran
        if not args.no_report:
            metrics = report(run_dir, args)
            err.print(f"[bold green]summary:[/] {summary(metrics, runner.plan.dilation)}")
            err.print(f"report: {said(run_dir / 'analysis' / 'report.html')}")
            if not upload(runner.store, runner.run_id):
                return 1
        err.print(fidelity(runner.manifest))
        exits = runner.manifest.get("node_exits") or []
        if exits and combo.scenario.nodes.exits != "allow":
            from orchestrator.run.node_exits import summary as exits_summary

            err.print(f"[bold red]run failed:[/] {said(exits_summary(exits))}: each one's last output is in "
                      f"{said(run_dir / 'exits')}; the report's Faults section lists them (a scenario that expects "
                      "nodes to quit sets nodes.exits: allow)")
            failed = True
        print(run_dir)
        done.append(run_dir)
    if len(done) > 1 and not args.no_report:
        from analysis.compare import load_rows, render_table

        err.print("[bold green]comparison[/] (again with: peerlab compare " + " ".join(map(said, done)) + ")")
        err.print(render_table(load_rows(done)), markup=False, highlight=False)
    return 1 if failed else 0


def _attempts(args: argparse.Namespace, combo: Any, choice: Any, admitted: dict) -> tuple[Any, Path] | int:
    """The combination's run (the runner and its directory), or the command's exit code if it failed.
    With a dilation of peerlab's choosing (`choice`), runs judged unfaithful on CPU grounds are run again
    at a larger k (orchestrator/run/auto_dilation.py); each attempt stays in the store. `admitted`: the
    combination's admission record (a run at another k is admitted again)."""
    from orchestrator.model.plan import make_plan
    from orchestrator.run import auto_dilation
    from orchestrator.run.admission import admit
    from orchestrator.run.runner import RunError, RunInterrupted, Runner
    from orchestrator.sim.sim_runner import SimInterrupted, SimRunner

    earlier: list[dict[str, Any]] = []
    while True:
        k = combo.scenario.dilation
        if choice is not None:
            why = choice.why if not earlier else f"attempt {len(earlier) + 1} of at most {auto_dilation.ATTEMPTS}"
            err.print(f"[bold cyan]dilation:[/] --dilate {k:g}, chosen by peerlab ({said(why)})")
        runner: Runner | SimRunner
        if args.backend == SIMULATOR:
            runner = SimRunner(combo.scenario, make_plan(combo.scenario, args.seed), console=err, label=combo.label)
        else:
            try:
                if earlier:  # another k: admitted again, before planning (it can be slow)
                    admitted = admit(combo.scenario, args.backend, args.force)
                runner = Runner(combo.scenario, make_plan(combo.scenario, args.seed), backend=args.backend,
                                console=err, shaping_mode=args.shaping, label=combo.label, force=args.force,
                                admitted=admitted)
            except RuntimeError as e:  # the backend cannot start (no Docker engine, image build failed)
                err.print(f"[bold red]error:[/] {said(e)}")
                return 1
        if choice is not None:
            runner.manifest.setdefault("dilation", {})["auto"] = auto_dilation.record(choice, k, earlier)
        try:
            run_dir = runner.run()
        except RunError as e:
            err.print(f"[bold red]run failed:[/] {said(e)}")
            print(runner.run_dir)
            return 1
        except (RunInterrupted, SimInterrupted) as e:
            err.print(f"[bold yellow]interrupted:[/] {said(e)}")
            print(runner.run_dir)
            return 130
        behind = auto_dilation.cpu_reasons(runner.manifest) if choice is not None else []
        nxt = auto_dilation.next_k(k) if behind else None
        if not behind:
            return runner, run_dir
        if nxt is None or len(earlier) + 1 >= auto_dilation.ATTEMPTS:
            err.print(f"[bold red]dilation:[/] still unfaithful on CPU grounds at --dilate {k:g} after "
                      f"{len(earlier) + 1} runs (the most --dilate auto makes): {said(behind[0])}; try a larger "
                      f"--dilate, fewer nodes, or a machine with more cores")
            return runner, run_dir
        earlier.append(auto_dilation.attempt(runner.manifest))
        err.print(f"[bold yellow]dilation:[/] unfaithful on CPU grounds at --dilate {k:g} ({said(behind[0])}); "
                  f"running it again at --dilate {nxt:g}; this run stays in the store as {said(run_dir)}")
        combo = dilated(args, combo, nxt)
