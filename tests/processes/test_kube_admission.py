"""Admission on the kubernetes backend, against an API server that answers what admission asks: the
namespace's ResourceQuotas and the cluster's nodes (tests/support/kube_api.py; no Kubernetes server can
run here). A run whose pods do not fit the quota or the nodes' allocatable is refused by `peerlab run`
with the figures and the node count that fits, before anything is created; --force runs it anyway."""
from __future__ import annotations

import pytest

from orchestrator.backends import kube_admission
from orchestrator.model.scenario import parse_scenario
from orchestrator.run import admission
from tests.support.cli import peerlab
from tests.support.kube_api import KubeAPI

QUOTA = {"kind": "ResourceQuotaList", "apiVersion": "v1", "metadata": {}, "items": [{
    "metadata": {"name": "team-quota", "namespace": "lab"},
    "status": {"hard": {"pods": "20", "requests.cpu": "2", "requests.memory": "4Gi", "limits.memory": "16Gi",
                        "services": "5"},
               "used": {"pods": "2", "requests.cpu": "200m", "requests.memory": "512Mi", "limits.memory": "1Gi"}}}]}
NODES = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [
    {"metadata": {"name": "w1"}, "spec": {}, "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}}},
    {"metadata": {"name": "w2"}, "spec": {"unschedulable": True},
     "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}]}


@pytest.fixture
def api(tmp_path, monkeypatch):
    """An API server with QUOTA in namespace `lab` (none elsewhere) and NODES; KUBECONFIG points at it."""
    server = KubeAPI(nodes=NODES["items"])
    for quota in QUOTA["items"]:
        server.put("lab", "resourcequotas", quota)
    kubeconfig = server.start(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("PEERLAB_K8S_NAMESPACE", "lab")
    yield kubeconfig
    server.stop()


def scenario(n: int):
    return parse_scenario(f"name: k\nnodes: {{count: {n}}}\nprotocol: gossipsub\n")


def test_pod_needs_come_from_the_charts_values():
    need = kube_admission.pod_needs()
    assert need == pytest.approx({"pods": 1, "cpu": 0.05, "memory": 64.0, "limits.memory": 256.0})


def test_a_lighter_cpu_request_is_what_admission_counts(monkeypatch):
    """PEERLAB_K8S_CPU_REQUEST: the pods' CPU request, read by admission as the chart's values get it
    (a dilated run's 100 light nodes, which 50m each would not let the scheduler place)."""
    monkeypatch.setenv("PEERLAB_K8S_CPU_REQUEST", "10m")
    assert kube_admission.pod_needs()["cpu"] == pytest.approx(0.01)
    assert kube_admission.node_resources()["node"]["requests"] == {"cpu": "10m", "memory": "64Mi"}
    monkeypatch.setenv("PEERLAB_K8S_CPU_REQUEST", "lots")
    with pytest.raises(RuntimeError, match="PEERLAB_K8S_CPU_REQUEST='lots' is not a CPU quantity"):
        kube_admission.pod_needs()


def test_a_run_beyond_the_namespace_quota_is_refused_with_the_figures(api):
    with pytest.raises(admission.AdmissionError) as err:
        admission.admit(scenario(100), "kubernetes")
    text = str(err.value)
    assert "100 nodes (one pod each) do not fit namespace lab" in text
    assert "pods: 100 needed (1 per pod), 18 left in quota team-quota of namespace lab" in text
    assert "requests.memory: 6400 MiB needed (64 per pod), 3584 left" in text
    assert "requests.cpu: 5 cores needed (0.05 per pod), 1.8 left" in text
    assert "services" not in text and "w2" not in text
    assert "At most 18 nodes of this scenario fit (--set nodes.count=18)" in text


def test_within_the_quota_but_beyond_the_schedulable_nodes(api, monkeypatch):
    monkeypatch.setenv("PEERLAB_K8S_NAMESPACE", "open")  # no quota there; w2 is cordoned
    with pytest.raises(admission.AdmissionError) as err:
        admission.admit(scenario(45), "kubernetes")
    assert "cpu: 2.25 cores needed (0.05 per pod), 2 left in the cluster's schedulable nodes" in str(err.value)
    assert "At most 40 nodes" in str(err.value)
    record = admission.admit(scenario(40), "kubernetes")
    assert record["checked"] and not record["problems"] and record["allocatable"]["cpu"] == 2


def test_force_runs_it_anyway_and_says_so(api):
    record = admission.admit(scenario(100), "kubernetes", force=True)
    assert record["forced"] and len(record["problems"]) == 5  # four of the quota's keys, the nodes' CPU


def test_a_cluster_that_cannot_be_asked_is_left_to_the_backend(tmp_path, monkeypatch):
    from tests.support.kubeconfig import KUBECONFIG

    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)  # an API server nobody answers
    monkeypatch.setenv("KUBECONFIG", str(path))
    record = admission.admit(scenario(5000), "kubernetes")
    assert record["checked"] is False and "could not be asked" in record["why"]


@pytest.mark.slow
def test_peerlab_run_refuses_before_creating_anything(api):
    result = peerlab("run", "scenarios/quickstart.yaml", "--backend", "kubernetes", "--namespace", "lab",
                     "--set", "nodes.count=100", env={"KUBECONFIG": str(api), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 3, result.stderr
    assert "refused: 100 nodes (one pod each) do not fit namespace lab" in result.stderr
    assert "Traceback" not in result.stderr


def test_cluster_nodes_on_one_kernel_count_its_cpus_once(tmp_path, monkeypatch):
    """kind's nodes on one machine each report its 2 CPUs and 8 GiB: admission counts that machine
    once (the same bootID), and their pod slots added up; a node on another kernel counts apart."""
    def info(boot: str) -> dict[str, str]:  # a kubelet's nodeInfo: every field the API has
        return {"bootID": boot, "architecture": "amd64", "containerRuntimeVersion": "containerd://1.6.20",
                "kernelVersion": "6.18.44", "kubeProxyVersion": "", "kubeletVersion": "v1.34.4",
                "machineID": boot[:4], "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12",
                "systemUUID": boot[:5]}
    machine = info("0d6a2b0c-boot-one")
    nodes = [{"metadata": {"name": f"k{i}"}, "spec": {},
              "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}, "nodeInfo": machine}}
             for i in range(3)]
    nodes.append({"metadata": {"name": "other"}, "spec": {},
                  "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                             "nodeInfo": info("another-kernel")}})
    server = KubeAPI(nodes=nodes)
    kubeconfig = server.start(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    try:
        room = kube_admission.cluster_room("lab", None)
    finally:
        server.stop()
    assert room.machines == 2
    assert room.allocatable == {"cpu": 6.0, "memory": 24 * 1024.0, "pods": 440.0}
