"""This machine and its leftovers: `doctor`, `clean`, `image` (the node image), `prepare` (Ansible)."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.cli.common import UsageError, add_command, err, key_values


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "image", help="build the node images (node/Dockerfile, node/adapters/*/Dockerfile) for "
                                       "the docker and kubernetes backends",
                    description="Build a node image with the local Docker engine, tagged by its content "
                                "(peerlab-node:<hash of node/ and the shaper>, peerlab-<adapter>:<hash of its "
                                "folder>); prints the tag. The docker backend does this by itself when a tag "
                                "is missing.",
                    examples=["peerlab image build                          # peerlab's node image",
                              "peerlab image build --implementation all     # and every adapter's",
                              "peerlab image build --tag-only               # the tag it would have",
                              "peerlab image build --shaper                 # the shaping daemon's, for charts/peerlab-shaper",
                              "peerlab image build --orchestrator           # a Job's, for `helm install --set-file scenario=`",
                              "peerlab image build --spark                  # Spark's executors, for `report --master k8s`"])
    p.add_argument("action", choices=["build"])
    p.add_argument("--implementation", default="peerlab", metavar="NAME",
                   help="whose image: peerlab (default), an adapter (go-libp2p, rust-libp2p, js-libp2p, py-libp2p: `peerlab contract "
                        "implementations`), or all")
    p.add_argument("--base-image", help="the image to build FROM (default: $PEERLAB_BASE_IMAGE or python:3.12-slim; "
                                        "without a registry: .ci/docker-base builds peerlab-base:bookworm)")
    p.add_argument("--tag-only", action="store_true", help="print the tag the image would have; build nothing")
    p.add_argument("--shaper", action="store_true",
                   help="the shaping daemon's image instead (peerlab's node image with crictl: "
                        "charts/peerlab-shaper; docs/backends.md#the-shaping-daemon)")
    p.add_argument("--orchestrator", action="store_true",
                   help="the orchestrator's image instead (peerlab's node image with the run's packages, the "
                        "chart and helm), whose Job runs an experiment inside the cluster: "
                        "docs/backends.md#an-experiment-in-the-cluster")
    p.add_argument("--spark", action="store_true",
                   help="the image of a report's Spark executors on Kubernetes instead (Java 17, this "
                        "machine's PySpark jars, the s3a jars): `peerlab report s3://... --master k8s`; "
                        "docs/analysis.md#spark-on-kubernetes")
    p.set_defaults(func=cmd_image)

    from orchestrator.tools.prepare import PLAYBOOKS

    p = add_command(sub, "prepare", help="prepare this machine with an Ansible playbook (host, kind, storage)",
                    examples=["peerlab prepare host --check   # what it would change", "peerlab prepare kind"],
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

    p = add_command(sub, "clean", help="remove what crashed runs left: namespaces, processes, containers; "
                                       "with --kubernetes, Helm releases",
                    examples=["peerlab clean", "peerlab clean --force 1a2b3c   # this run, lease or not",
                              "peerlab clean --kubernetes --namespace peerlab"],
                    description="Remove what runs whose orchestrator died left behind. On this machine (root): "
                                "node processes, network namespaces, scratch folders, Docker containers, "
                                "networks and volumes labelled peerlab.run; each run's event logs are stored "
                                "into its run directory first. With --kubernetes: the Helm releases pl<short> "
                                "in the namespace whose lease (renewed by a live orchestrator every 15 s) "
                                "lapsed, or that have none (a dead run's state file on this machine goes with "
                                "its release). A run whose lease is held (its orchestrator lives), "
                                "or that has none, is never touched unless --force names it; a run's scratch "
                                "copies of its logs go only once every log is stored and checked.")
    p.add_argument("--force", nargs="*", metavar="RUN",
                   help="also clean these runs (short id, run id, or release pl<short>) though their lease is held "
                        "or missing; with no RUN, every run")
    p.add_argument("--kubernetes", action="store_true",
                   help="clean Helm releases in the cluster of your kubeconfig instead (needs no root)")
    p.add_argument("--namespace", help="with --kubernetes: the namespace (default $PEERLAB_K8S_NAMESPACE or peerlab)")
    p.add_argument("--kube-context", help="with --kubernetes: kubeconfig context (default: the current one)")
    p.set_defaults(func=cmd_clean)

    p = add_command(sub, "doctor",
                    help="what this machine offers: netns, htb, netem, java, docker, helm, a Kubernetes cluster")
    p.set_defaults(func=cmd_doctor)


def cmd_image(args: argparse.Namespace) -> int:
    from node.adapters import IMPLEMENTATIONS
    from orchestrator.backends.docker import docker_client
    from orchestrator.builds import node_image as image

    base = args.base_image or image.base_image()
    if args.shaper:
        from orchestrator.cluster import shaper
        try:
            print(shaper.build_image(lambda m: err.print(m, markup=False, highlight=False), base))
        except shaper.ShaperError as e:
            err.print(f"error: {e}", style="bold red", markup=False, highlight=False)
            return 1
        return 0
    if args.orchestrator or args.spark:  # the images built FROM the node image or the base
        from orchestrator.builds import orchestrator_image, spark_image
        builder = orchestrator_image if args.orchestrator else spark_image
        if args.tag_only:
            print(builder.image_tag(base))
            return 0
        try:
            print(builder.build(docker_client(), base, lambda m: err.print(m, markup=False, highlight=False)))
        except RuntimeError as e:
            err.print(f"error: {e}", style="bold red", markup=False, highlight=False)
            return 1
        return 0
    names = list(IMPLEMENTATIONS) if args.implementation == "all" else [args.implementation]
    unknown = [n for n in names if n not in IMPLEMENTATIONS]
    if unknown:
        raise UsageError(f"--implementation: unknown {unknown[0]!r}; known: {', '.join(IMPLEMENTATIONS)}, all")
    if args.tag_only:
        for name in names:
            print(image.image_tag(base, name))
        return 0
    try:
        client = docker_client()
        for name in names:
            print(image.build(client, base, say=lambda m: err.print(m, markup=False, highlight=False), implementation=name))
    except RuntimeError as e:
        err.print(f"error: {e}", style="bold red", markup=False, highlight=False)
        return 1
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from orchestrator.tools.prepare import prepare

    extravars = key_values(args.extra, "-e", "peerlab_install_docker=false")
    rc, stats = prepare(args.playbook, check=args.check, extravars=extravars)
    if rc != 0:
        err.print(f"[bold red]error:[/] playbooks/{args.playbook}.yml failed (exit {rc}); see the task above")
    return 0 if rc == 0 else 1


def clean_kubernetes(args: argparse.Namespace) -> int:
    import shutil

    from orchestrator.backends import kube_cluster, kube_config, kube_lease

    for path in kube_config.orphaned_credentials():  # a SIGKILLed orchestrator's TLS key and certificates
        shutil.rmtree(path, ignore_errors=True)
        err.print(f"removed {path}: the cluster credentials of an orchestrator that died", markup=False)

    opts = kube_cluster.settings()
    namespace, context = args.namespace or opts["namespace"], args.kube_context or opts["context"]
    try:
        cluster = kube_cluster.KubeCluster(namespace, context)
        owners = cluster.owners()
    except Exception as e:  # noqa: BLE001 - no cluster, no helm, an API server that does not answer
        err.print(f"error: could not list the releases in namespace {namespace}: {e}", markup=False)
        return 1
    now = kube_lease.now_utc()
    found = failed = 0
    cleaned: set[str] = set()
    for owner in owners:
        what = f"release {owner.release} in namespace {namespace}" if owner.installed else \
            f"lease {owner.release} in namespace {namespace} (no release)"
        if owner.alive(now) and not forced(args, owner.release, owner.release.removeprefix("pl")):
            err.print(f"{what}: orchestrator alive ({owner.describe(now)}); left alone (use --force to clean it anyway)")
            continue
        err.print(f"{what}: {owner.describe(now)}; uninstalling" if owner.installed else f"{what}: deleting")
        try:
            cluster.uninstall(owner.release)
            found += 1
            cleaned.add(owner.release.removeprefix("pl"))
        except Exception as e:  # noqa: BLE001 - the others are still cleaned
            err.print(f"error: {e}", markup=False)
            failed += 1
    forget_dead_runs(cleaned)
    try:
        found += clean_reports(cluster.core, namespace, args)
    except Exception as e:  # noqa: BLE001 - the API's errors: the releases are cleaned all the same
        err.print(f"error: could not clean the reports' executors and Secrets in namespace {namespace}: {e}",
                  markup=False)
        failed += 1
    if not found and not failed:
        err.print(f"nothing to clean in namespace {namespace}")
    return 1 if failed else 0


def clean_reports(core, namespace: str, args: argparse.Namespace) -> int:
    """The executors and Secret of reports on the cluster (`peerlab report --master k8s`) whose driver
    died on this host (or whose Secret is gone); a live driver's, or another host's, only if --force
    names the report. How many were removed."""
    from orchestrator import spark_on_k8s
    from orchestrator.record.host_state import holder_here

    removed = 0
    for report_id, driver in spark_on_k8s.reports(core, namespace).items():
        alive = holder_here(driver) if driver else False
        if alive is not False and not forced(args, report_id):
            err.print(f"report {report_id} in namespace {namespace}: driver {driver} "
                      + ("alive; left alone" if alive else "on another host; left alone (--force to clean it)"))
            continue
        spark_on_k8s.remove(core, namespace, report_id)
        for template in Path(tempfile.gettempdir()).glob(f"peerlab-report-{report_id}-*.json"):
            template.unlink(missing_ok=True)  # the executors' pod template its driver wrote
        err.print(f"report {report_id} in namespace {namespace}: driver {driver or 'finished'} gone; "
                  "its executors and Secret removed")
        removed += 1
    return removed


def forget_dead_runs(shorts: set[str]) -> None:
    """What stays on this host of the runs whose release `clean --kubernetes` removed, when their
    orchestrator is dead (its lease free): the logs its scratch directory had fetched are stored into
    the run directory, which says it crashed; the scratch directory (the release's values, with the
    run's token) and the state file go (a later `peerlab clean` would find it there). A scratch
    directory whose logs cannot be stored stays with its state file, for the next `peerlab clean`."""
    from orchestrator.record.host_state import find_runs, forget_run, mark_status
    from orchestrator.record.salvage import salvage_logs

    for run in find_runs():  # (a free lease is claimed: ours until forget_run, or until this process ends)
        if run.short not in shorts or run.lease.state != "free":
            continue
        if run.state:
            saved = salvage_logs(run.state.run_dir, [Path(run.state.scratch) / "events"])
            detail = "orchestrator died; its release removed by `peerlab clean --kubernetes`"
            if saved.stored:
                detail += f", which stored {len(saved.stored)} event logs its orchestrator had fetched"
            mark_status(run.state.run_dir, "crashed", detail)
            err.print(f"run {run.state.run_id}: marked crashed", markup=False, highlight=False)
            if not saved.complete:
                err.print(f"run {run.short}: {len(saved.missing)} event logs kept in {run.state.scratch} "
                          f"({saved.problem}; `peerlab clean` again stores them)", markup=False, highlight=False)
                continue
            shutil.rmtree(run.state.scratch, ignore_errors=True)
        forget_run(run.short)


def forced(args: argparse.Namespace, *names: str) -> bool:
    """Does --force name this run (its short id, run id or release), or, given bare, every run?"""
    return args.force is not None and (not args.force or any(n and n in args.force for n in names))


def leave_alone(run, owner: str | None, args: argparse.Namespace) -> str:
    """Why `clean` must not touch this run ("" to clean it): its lease is held, or it has none and
    nothing here says its orchestrator died (`--force` naming it overrides both)."""
    from orchestrator.record.host_state import holder_here

    if forced(args, run.short, run.name, f"pl{run.short}"):
        return ""
    if run.lease.state == "held":
        return f"{run.lease.describe()}: still running"
    if run.lease.state == "free":
        return ""
    if owner and holder_here(owner) is False:
        return ""  # its Docker objects name an orchestrator that died on this host
    if owner:
        # no lease here, but its Docker objects name their orchestrator: alive on this host, or on another
        # host sharing the engine (where nothing here can tell whether it lives)
        where = "alive on this host" if holder_here(owner) else "on another host: its state file is there"
        return f"Docker objects of orchestrator {owner} ({where})"
    what = "a state file" if run.state or run.unreadable else "namespaces" if owner is None else "Docker objects"
    return f"{what} but no lease here (a run of an older peerlab, or one whose lease is gone)"


def cmd_clean(args: argparse.Namespace) -> int:
    if args.kubernetes:
        return clean_kubernetes(args)
    if args.namespace or args.kube_context:
        raise UsageError("--namespace and --kube-context go with --kubernetes")
    from orchestrator.backends.docker import docker_leftovers
    from orchestrator.record import lease as leases
    from orchestrator.record.host_state import FoundRun, find_runs

    if os.geteuid() != 0:
        err.print("[bold red]error:[/] cleaning namespaces needs root")
        return 1
    runs = {run.short: run for run in find_runs()}
    in_docker = docker_leftovers()  # containers, networks, volumes of docker-backend runs: short -> owner
    for short in set(in_docker) - set(runs):
        runs[short] = FoundRun(short, None, leases.Lease("none"))
    found = failed = 0
    for short, run in sorted(runs.items()):
        why = leave_alone(run, in_docker.get(short), args)
        if why:
            err.print(f"run {run.name}: {why}; left alone (`peerlab clean --force {short}` cleans it anyway)",
                      markup=False, highlight=False)
            continue
        found += 1
        failed += not clean_run(run, short in in_docker, forced(args, run.short, run.name, f"pl{run.short}"))
    if not found:
        err.print("nothing to clean")
    return 1 if failed else 0


def clean_run(run, in_docker: bool, named: bool = False) -> bool:
    """Stop what the run left running, store its nodes' logs (checked), then remove the rest; the
    scratch copies of the logs (scratch directory, Docker volume) only once every log is stored.
    False if some could not be: they, the state file and the lease stay for the next `clean`. A Docker
    volume of a run without a state file (no run directory to store into) goes when --force `named` it."""
    from orchestrator.backends.docker import event_volume_dirs, remove_docker_objects
    from orchestrator.backends.local import remove_run_objects
    from orchestrator.record import lease as leases
    from orchestrator.record.host_state import forget_run, lease_path, mark_status, remove_state_file
    from orchestrator.record.salvage import salvage_logs

    state, short = run.state, run.short
    removed = remove_run_objects(short)  # the nodes first: their logs stop growing
    docker = remove_docker_objects(short, volumes=False) if in_docker else {}
    sources = [*([Path(state.scratch) / "events"] if state else []), *(event_volume_dirs(short) if in_docker else [])]
    saved = salvage_logs(state.run_dir if state else None, sources)
    if saved.complete and state:
        shutil.rmtree(state.scratch, ignore_errors=True)
    if in_docker and (saved.complete or (named and not state)):
        docker["volumes"] = remove_docker_objects(short)["volumes"]
    if docker:
        err.print(f"run {short}: removed {docker['containers']} containers, {docker['networks']} networks, "
                  f"{docker.get('volumes', 0)} volumes")
    kept = f"{state.scratch if state else ''}{' and ' if state and in_docker else ''}" \
           f"{f'Docker volume pl{short}-events' if in_docker else ''}"
    if state:
        detail = (f"orchestrator died; cleaned by `peerlab clean`, which stored {len(saved.stored)} event logs the run "
                  "had not (`peerlab report` reads them)")
        if not saved.complete:
            detail += (f"; {len(saved.missing)} could not be stored ({saved.problem}): every node's log is kept "
                       f"in {kept}, and `peerlab clean` again stores them")
        mark_status(state.run_dir, "crashed", detail)
        err.print(f"run {state.run_id}: {len(saved.stored)} event logs stored into {state.run_dir}"
                  + ("" if saved.complete else f"; {len(saved.missing)} could not be ({saved.problem}): kept in {kept}"),
                  markup=False, highlight=False)
    elif not saved.complete and not named:
        err.print(f"run {short}: {len(saved.missing)} event logs kept in {kept} ({saved.problem}; "
                  f"`peerlab clean --force {short}` removes them)", markup=False, highlight=False)
    done = saved.complete or (named and not state)
    if done:
        if run.unreadable:
            remove_state_file(short)
        forget_run(short)
    else:
        leases.let_go(lease_path(short))
    name = run.state.run_id if run.state else f"pl{short}-* (no state file)"
    err.print(f"run {name}: killed {removed['processes']} processes, removed {removed['namespaces']} namespaces",
              markup=False, highlight=False)
    return done


def cmd_doctor(args: argparse.Namespace) -> int:
    from orchestrator.tools.doctor import checks, summary

    rows = checks()
    for r in rows:
        mark = "[green]ok[/]  " if r["ok"] else "[red]no[/]  "
        err.print(f"{mark}{r['what']}: {r['detail']}")
    for line in summary(rows):
        print(line)
    return 0
