"""`peerlab run SCENARIO --backend kubernetes --in-cluster`: the run's orchestrator inside the cluster.

Installs the chart's experiment release (a Job of the orchestrator's image, kube_experiment.py),
prints its log as the run's progress, fetches the stored run from the s3:// store into the cache and
reports it there (`peerlab report URL --local-copy`), and uninstalls the release, at the end or at a
signal. May import: orchestrator.cli.common, orchestrator.backends, orchestrator.builds,
orchestrator.cluster (the local cluster's store), orchestrator.store.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.cli.common import UsageError, err, said

RUN_ID = re.compile(r"\d{8}-\d{6}-[\w.-]+-[0-9a-f]{6}$")
LOCAL_STORE = "s3://peerlab/runs"  # the local cluster's bundled store (peerlab cluster up)
LOCAL_STORE_SECRET = "peerlab-store"  # its client settings for pods (orchestrator/cluster/store_release.py CLIENT_SECRET)
TIMEOUT_S = 3600  # the chart's experiment.activeDeadlineSeconds


def job_args(args: argparse.Namespace) -> list[str]:
    """The `peerlab run` arguments the Job's orchestrator gets besides the scenario and its store."""
    out = [a for o in args.overrides for a in ("--set", o)]
    out += ["--seed", str(args.seed)] if args.seed is not None else []
    out += ["--shaping", args.shaping] if args.shaping != "auto" else []
    return out + (["--force"] if args.force else [])


def _store(scenario: Any, namespace_has_local_store: bool) -> str:
    store = str(scenario.output.store)
    if store.startswith("s3://"):
        return store
    if namespace_has_local_store:
        return LOCAL_STORE
    raise UsageError(f"--in-cluster: the run's logs go to an s3:// store the cluster reaches, and output.store is "
                     f"{store!r}: --set output.store=s3://BUCKET/PREFIX with --store-secret NAME (a Secret with "
                     "the store client's AWS_* settings in the run's namespace); `peerlab cluster up` makes both "
                     f"for its bundled store ({LOCAL_STORE}, Secret peerlab-store)")


def _local_store_env() -> None:
    """The local cluster's store as seen from this machine, where no AWS_* settings say otherwise."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        return
    from orchestrator.cluster import store_release as store
    from orchestrator.cluster.layout import Layout

    if store.credentials_file(Layout.default()).exists():
        os.environ.update(store.credentials(Layout.default()))


def run_in_cluster(args: argparse.Namespace, combos: list[Any]) -> int:
    if args.backend != "kubernetes":
        raise UsageError("--in-cluster runs the orchestrator in a Kubernetes cluster: add --backend kubernetes")
    if len(combos) != 1:
        raise UsageError(f"--in-cluster runs one scenario per Job, and this is a matrix of {len(combos)}: "
                         "run each combination with --set")
    from kubernetes.client.exceptions import ApiException

    from orchestrator.backends import kube_cluster, kube_experiment
    from orchestrator.builds import orchestrator_image

    opts = kube_cluster.settings()
    cluster = kube_cluster.KubeCluster(opts["namespace"], opts["context"])
    secret = args.store_secret
    try:
        cluster.core.read_namespaced_secret(secret, cluster.namespace, _request_timeout=kube_cluster.REST_TIMEOUT)
        has_secret = True
    except ApiException as e:
        if e.status != 404:
            raise
        has_secret = False
    store = _store(combos[0].scenario, has_secret and secret == LOCAL_STORE_SECRET)
    if not has_secret:
        raise UsageError(f"--store-secret {secret}: no such Secret in namespace {cluster.namespace} (the store "
                         "client's AWS_* settings for the Job's orchestrator)")
    tag = orchestrator_image.image_tag()
    experiment = kube_experiment.Experiment(cluster, Path(args.scenario), job_args(args), store, secret, tag)
    err.print(f"in the cluster: release {experiment.release} in namespace {cluster.namespace}, the Job's "
              f"orchestrator {tag}, the run stored in {store}")

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with tempfile.TemporaryDirectory(prefix="peerlab-exp-") as scratch:
            experiment.install(Path(scratch) / "values.json")
        succeeded, last = experiment.follow(lambda line: err.print(f"  job | {line}", markup=False, highlight=False),
                                            TIMEOUT_S)
    except KeyboardInterrupt:
        err.print(f"[bold yellow]interrupted:[/] uninstalling {experiment.release} (its orchestrator stores what "
                  "it has, then ends)")
        return 130
    except kube_experiment.ExperimentError as e:
        err.print(f"[bold red]error:[/] {said(e)}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        experiment.uninstall()
    run_id = Path(last).name
    if not RUN_ID.match(run_id):
        err.print(f"[bold red]run failed:[/] the Job's orchestrator ended without a run ({said(last)})")
        return 1
    url = f"{store.rstrip('/')}/{run_id}"
    if not succeeded:
        err.print(f"[bold red]run failed:[/] the Job's orchestrator failed; what it stored: {said(url)}")
        return 1
    err.print(f"the run is in {said(url)}")
    if args.no_report:
        print(url)
        return 0
    _local_store_env()
    from orchestrator.cli.report import cmd_report

    args.run_dir, args.local_copy = url, True
    return cmd_report(args)
