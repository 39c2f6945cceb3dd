"""The orchestrator within the cluster: the chart's experiment Job, installed by `helm install` with a
scenario or by `peerlab run --in-cluster`, runs the scenario, stores the run in the cluster's store and
leaves nothing of it behind."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.cluster import shaper
from orchestrator.cluster import store_release as store
from tests.cluster.support import kubectl, store_client
from tests.support.cli import ROOT, cache_with_jars, peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]


def test_helm_install_of_a_scenario_runs_the_experiment_in_the_cluster(cluster):
    """What a user does with nothing of peerlab on their machine but helm: `helm install` of the chart
    with a scenario. The release is a Job whose orchestrator (the orchestrator's image) installs the
    run's nodes as a release of its own, runs the scenario with them over the pod network and the
    shaping daemons, stores every log in the cluster's store and removes its nodes; the Job completes.
    Uninstalling the release leaves nothing of it."""
    state, env = cluster
    s3 = store.credentials(state)
    tag = peerlab("image", "build", "--orchestrator", "--tag-only").stdout.strip()
    helm = [str(ROOT / ".tools" / "bin" / "helm"), "--kubeconfig", env["KUBECONFIG"], "-n", store.RUNS_NAMESPACE]
    release = "exp-test"
    before = {o["Key"] for o in store_client(s3).list_objects_v2(Bucket="peerlab", Prefix="in-cluster/").get("Contents", [])}
    done = subprocess.run([*helm, "install", release, str(ROOT / "charts" / "peerlab"),
                           "--set-file", f"scenario={ROOT / 'scenarios' / 'ci-smoke.yaml'}",
                           "--set", "experiment.store=s3://peerlab/in-cluster",
                           "--set", f"experiment.storeSecret={store.CLIENT_SECRET}",
                           "--set", f"experiment.image.tag={tag.split(':', 1)[1]}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    try:
        job = f"job/{release}-experiment"
        waited = kubectl(env, "wait", "-n", store.RUNS_NAMESPACE, "--for=condition=complete", job, "--timeout=100s",
                         check=False)
        logs = kubectl(env, "logs", "-n", store.RUNS_NAMESPACE, job, check=False).stdout
        print(logs[-2500:])
        assert waited.returncode == 0, (waited.stderr, logs[-3000:])
        assert "fidelity: faithful" in logs
        objects = store_client(s3).list_objects_v2(Bucket="peerlab", Prefix="in-cluster/")["Contents"]
        keys = {o["Key"] for o in objects} - before
        (run_id,) = {k.split("/")[1] for k in keys}
        assert {f"in-cluster/{run_id}/events/n{i}.jsonl.gz" for i in range(8)} <= keys
        manifest = json.loads(store_client(s3).get_object(Bucket="peerlab", Key=f"in-cluster/{run_id}/manifest.json")
                              ["Body"].read())
        assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
        assert manifest["fidelity"]["verdict"] == "faithful", manifest["fidelity"]
        assert [f["action"] for f in manifest["faults_executed"]] == ["kill", "restart", "partition", "heal"]
        # the run's nodes were its own release, gone with the run
        assert kubectl(env, "get", "pods", "-n", store.RUNS_NAMESPACE, "-l", "peerlab.run", "-o", "name").stdout == ""
    finally:
        gone = subprocess.run([*helm, "uninstall", release, "--wait"], capture_output=True, text=True, timeout=120)
    assert gone.returncode == 0, gone.stderr
    left = kubectl(env, "get", "jobs,pods,configmaps,serviceaccounts,roles,rolebindings", "-n", store.RUNS_NAMESPACE,
                   "-l", f"app.kubernetes.io/instance={release}", "-o", "name")
    assert left.stdout.strip() == ""
    assert kubectl(env, "get", "rolebindings", "-n", shaper.NAMESPACE, "-o", "name").stdout.count(release) == 0


def test_peerlab_run_in_cluster_installs_follows_reports_and_removes_its_experiment(cluster, tmp_path):
    """`peerlab run --backend kubernetes --in-cluster`: the orchestrator runs in the cluster as the
    chart's experiment Job (the same release a `helm install` with a scenario makes); peerlab prints
    the Job's log as the run's progress, fetches the stored run from the cluster's store, reports it
    here, and uninstalls the release: nothing of it left in the namespace."""
    state, env = cluster
    s3 = store.credentials(state)
    cache = cache_with_jars(tmp_path / "cache")
    done = peerlab("run", str(ROOT / "scenarios" / "ci-smoke.yaml"), "--backend", "kubernetes", "--in-cluster",
                   "--namespace", store.RUNS_NAMESPACE, "--set", "output.store=s3://peerlab/in-cluster-cli",
                   timeout=900, env={**os.environ, **env, **s3, "PEERLAB_CACHE": str(cache)})
    print(done.stderr[-2500:])
    assert done.returncode == 0, done.stderr[-3000:]
    job_lines = [line for line in done.stderr.splitlines() if line.startswith("  job | ")]
    assert any("T0: running" in line for line in job_lines) and any("collected 8 event logs" in line
                                                                     for line in job_lines), job_lines[-20:]
    report = Path(done.stdout.strip().splitlines()[-1])
    assert report.name == "report.html" and report.exists()
    run_dir = report.parent.parent
    assert run_dir.parent == cache / "s3" / "peerlab" / "in-cluster-cli"  # fetched from the store
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
    assert manifest["fidelity"]["verdict"] == "faithful", manifest["fidelity"]
    assert [f["action"] for f in manifest["faults_executed"]] == ["kill", "restart", "partition", "heal"]
    assert json.loads((run_dir / "analysis" / "metrics.json").read_text())
    left = kubectl(env, "get", "jobs,pods,configmaps,serviceaccounts,roles,rolebindings", "-n", store.RUNS_NAMESPACE,
                   "-l", "app.kubernetes.io/name=peerlab-experiment", "-o", "name")
    assert left.stdout.strip() == ""
    releases = subprocess.run([str(ROOT / ".tools" / "bin" / "helm"), "--kubeconfig", env["KUBECONFIG"], "list", "-n",
                               store.RUNS_NAMESPACE, "-q"], capture_output=True, text=True, timeout=60).stdout.split()
    assert not [r for r in releases if r.startswith("exp")], releases
