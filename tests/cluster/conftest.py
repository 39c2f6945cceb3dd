"""The local cluster for tests/cluster: the `cluster` fixture brings the kind cluster `peerlab cluster up`
makes (three nodes) up once for the whole run of this directory, before its first test, and at the end
takes it down and checks that nothing of it is left on the host (support.host_state before and after).

The test modules run in the order of their names (pytest's), one after another on the same cluster:
test_cluster_nodes (the cluster itself), test_runs_on_the_cluster (the quickstart into the cluster's
store, gossipsub-mixed), test_sigkilled_run_cleaned, test_tenancy (the chart's RBAC, admission),
test_time_dilation, test_within_the_cluster (the orchestrator as a Job). A new module's name places it.
"""
from __future__ import annotations

import pytest

from orchestrator.cluster import lifecycle
from orchestrator.cluster.layout import Layout
from tests.cluster.support import NAMESPACE, NODES, host_state
from tests.support.cli import peerlab


@pytest.fixture(scope="session")
def cluster():
    """The local 3-node cluster, up once for the whole tests/cluster run (building nothing when
    set-up has built its programs and node image), with the node images of this checkout loaded into
    every node; down after the last test, with nothing of it left on the host."""
    state = Layout.default()
    before = host_state()
    built = peerlab("image", "build", "--orchestrator", timeout=900)  # `up` loads it with the node images
    assert built.returncode == 0, built.stderr[-3000:]
    up = peerlab("cluster", "up", "--nodes", str(NODES), timeout=1800)
    assert up.returncode == 0, up.stderr[-3000:]
    print(up.stderr[-600:])
    env = {"KUBECONFIG": str(state.kubeconfig), "PEERLAB_K8S_NAMESPACE": NAMESPACE}
    yield state, env
    down = peerlab("cluster", "down", timeout=300)
    assert down.returncode == 0, down.stderr[-2000:]
    st = lifecycle.status(state)
    assert st["cluster"] is None and st["containers"] == [], st
    assert st["leftovers"] == [], st["leftovers"]
    assert host_state() - before == set()
