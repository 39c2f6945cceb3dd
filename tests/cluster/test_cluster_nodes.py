"""The local cluster itself, as every other test of tests/cluster finds it: three Ready nodes, kubelet
1.34, flannel's overlay between them, the shaping daemon on each, the S3 store in its pod."""
from __future__ import annotations

import json
import subprocess

import pytest

from orchestrator.cluster import layout as L
from orchestrator.cluster import lifecycle, shaper
from orchestrator.cluster import store_release as store
from tests.cluster.support import NODES, kubectl

pytestmark = [pytest.mark.emulation, pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]


def test_the_cluster_is_a_real_three_node_cluster(cluster):
    """Three nodes Ready (kind's control plane and two workers), each with its kubelet 1.34 and its
    share of the pod range, flannel's overlay on each, and pods on two nodes reaching each other."""
    state, env = cluster
    nodes = json.loads(kubectl(env, "get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == L.node_names(NODES)
    for node in nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready["Ready"] == "True", node["metadata"]["name"]
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.34.")
        assert not node["spec"].get("taints"), node["spec"]  # every node runs the scenario's pods
    assert len({n["spec"]["podCIDR"] for n in nodes}) == NODES
    flannel = json.loads(kubectl(env, "get", "pods", "-n", "kube-system", "-l", "app=flannel", "-o", "json").stdout)["items"]
    assert sorted(p["spec"]["nodeName"] for p in flannel) == L.node_names(NODES)
    assert all(p["status"]["phase"] == "Running" for p in flannel)
    for node in L.node_names(NODES):  # the overlay's device, a VXLAN, in each node
        link = subprocess.run(["docker", "exec", node, "ip", "-d", "link", "show", "flannel.1"],
                              capture_output=True, text=True)
        assert link.returncode == 0 and "vxlan id 1" in link.stdout, link.stderr
    daemons = json.loads(kubectl(env, "get", "pods", "-n", shaper.NAMESPACE, "-l", "app.kubernetes.io/name=peerlab-shaper",
                                 "-o", "json").stdout)["items"]
    assert sorted(p["spec"]["nodeName"] for p in daemons) == L.node_names(NODES)  # the shaping daemon on each
    st = lifecycle.status(state)
    assert st["cluster"] == L.NAME and st["nodes_ready"], st
    # the S3 store in its pod, reached from this host at the node's address
    assert st["store"] == {"endpoint": store.endpoint(), "answers": True, "settings": str(store.credentials_file(state))}
    assert store.credentials_file(state).stat().st_mode & 0o077 == 0  # its keys: root's alone
    pods = json.loads(kubectl(env, "get", "pods", "-n", store.NAMESPACE, "-o", "json").stdout)["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
