"""A dilated run (--dilate) on the local cluster: each pod's TCP (minimum RTO, cubic in experiment
time) set by its node's shaping daemon, the namespace kept `restricted`."""
from __future__ import annotations

import json

import pytest

from orchestrator.shaping import dilated_cubic
from tests.cluster.support import kubectl, run_on_cluster
from tests.support.cli import ROOT

pytestmark = [pytest.mark.emulation, pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]


def test_a_dilated_run_on_the_cluster(cluster, tmp_path):
    """--dilate on kubernetes: every pod's TCP minimum RTO scaled by k, written into its namespace by
    its cluster node's shaping daemon (no pod sysctl: the kubelets allow none and the namespace stays
    `restricted`), the nodes' clocks dilated, the fault timeline on the dilated clock; the run
    completes, faithful."""
    state, env = cluster
    dilated = {**env, "PEERLAB_K8S_NAMESPACE": "peerlab-test-dilated"}
    run_dir = run_on_cluster(dilated, ROOT / "scenarios" / "ci-smoke.yaml", tmp_path, "--dilate", "2")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["dilation"]["factor"] == 2, manifest.get("dilation")
    assert manifest["fidelity"]["verdict"] == "faithful", manifest["fidelity"]
    assert [f["action"] for f in manifest["faults_executed"]] == ["kill", "restart", "partition", "heal"]
    # the local cluster's nodes share this machine's kernel: cubic in experiment time, let go after
    assert manifest["tcp"] == {"net.ipv4.tcp_congestion_control": dilated_cubic.NAME, "net.ipv4.tcp_rto_min_us": "400000"}
    assert not (dilated_cubic.CLAIMS / manifest["run_id"].rsplit("-", 1)[1]).exists()
    labels = json.loads(kubectl(env, "get", "namespace", "peerlab-test-dilated", "-o", "json").stdout)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    kubectl(env, "delete", "namespace", "peerlab-test-dilated", "--wait=false")
