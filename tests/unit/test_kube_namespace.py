"""The run's namespace (KubeCluster.ensure_namespace): made `restricted` for Pod Security, one that
exists kept, and an API server nobody answers named before anything is installed."""
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException


class NamespaceApi:
    def __init__(self, existing_labels=None, status=404):
        self.existing, self.status, self.created, self.kwargs = existing_labels, status, [], []

    def read_namespace(self, name, **kwargs):
        self.kwargs.append(kwargs)
        if self.existing is None:
            raise ApiException(status=self.status)
        return SimpleNamespace(metadata=SimpleNamespace(labels=self.existing))

    def create_namespace(self, body, **kwargs):
        self.created.append(body)


def test_the_namespace_is_created_restricted_and_one_that_exists_is_kept(cluster):
    """The pods hold no capability and set no sysctl (their daemon sets their TCP, dilated or not):
    a namespace peerlab makes is `restricted`; one that exists is used as it is."""
    cluster.core = NamespaceApi()
    cluster.ensure_namespace()
    (made,) = cluster.core.created
    assert made.metadata.name == "peerlab-test"
    assert made.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert cluster.core.kwargs[0]["_request_timeout"]
    cluster.core = NamespaceApi({"pod-security.kubernetes.io/enforce": "restricted"})
    cluster.ensure_namespace()
    assert cluster.core.created == []
    cluster.core = NamespaceApi(status=403)  # may not read namespaces: left to helm
    cluster.ensure_namespace()
    assert cluster.core.created == []


def test_an_api_server_nobody_answers_is_named_before_anything_is_installed(cluster, monkeypatch):
    from orchestrator.backends import kube_cluster as kc

    monkeypatch.setattr(kc, "REST_TIMEOUT", 2)
    cluster.core.api_client.rest_client.pool_manager.connection_pool_kw["retries"] = 0
    with pytest.raises(RuntimeError, match=r"API server at https://127.0.0.1:1 does not answer"):
        cluster.ensure_namespace()
