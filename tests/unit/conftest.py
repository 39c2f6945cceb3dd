"""What the unit tests of the kubernetes backend's client share (tests/unit/test_kube_*.py): `cluster`,
a KubeCluster of the namespace peerlab-test built from a kubeconfig of a cluster that is not there (its
API calls are answered by each test's stand-ins)."""
import pytest

from orchestrator.backends.kube_cluster import KubeCluster
from tests.support.kubeconfig import KUBECONFIG


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> KubeCluster:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    return KubeCluster("peerlab-test")
