"""What a run may do and take in its namespace, as the real API server decides: the chart's
ServiceAccount allowed its work and nothing else (RBAC); admission against the namespace's
ResourceQuota and the nodes' allocatable."""
from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.cluster.support import NAMESPACE, NODES, api_server, kubectl
from tests.support.cli import ROOT, peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]


def test_the_charts_role_lets_the_orchestrator_do_its_work_and_nothing_else(cluster, tmp_path):
    """The chart's ServiceAccount, as the API server sees it (a token from the TokenRequest API): it
    lists and watches pods, execs into them and reads their logs in its namespace; reading secrets,
    deleting pods, creating pods or listing another namespace's pods is refused (403)."""
    state, env = cluster
    release = "plabc001"
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"run": {"id": "rbac", "short": "abc001"}, "nodes": {"count": 0},
                                  "control": {"token": "t" * 16}, "plan": "{}"}))
    helm = [str(ROOT / ".tools" / "bin" / "helm"), "--namespace", NAMESPACE]
    done = subprocess.run([*helm, "install", release, str(ROOT / "charts" / "peerlab"), "--create-namespace",
                           "-f", str(values)], capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    try:
        account = f"{release}-orchestrator"
        token = kubectl(env, "create", "token", account, "-n", NAMESPACE).stdout.strip()
        # a kubeconfig of the account alone (the admin's has a client certificate, which would win)
        as_account = tmp_path / "account.kubeconfig"
        server, ca = api_server(env)
        (tmp_path / "ca.crt").write_text(ca)
        as_account.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "c", "cluster": {"server": server,
                                                   "certificate-authority": str(tmp_path / "ca.crt")}}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}))
        account_env = {**env, "KUBECONFIG": str(as_account)}
        assert kubectl(account_env, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == \
            f"system:serviceaccount:{NAMESPACE}:{account}"

        def can(verb: str, resource: str, namespace: str = NAMESPACE) -> bool:
            kind, _, sub = resource.partition("/")  # `can-i VERB pods/exec` would ask of a pod named exec
            answer = kubectl(account_env, "auth", "can-i", verb, kind, *([f"--subresource={sub}"] if sub else []),
                             "-n", namespace, check=False)
            return answer.stdout.strip() == "yes"

        def api(method: str, path: str) -> int:
            """The API server's own answer to the account's request (not a review of it): its status."""
            request = urllib.request.Request(f"{server}{path}", method=method,
                                             headers={"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(request, context=ssl.create_default_context(
                        cafile=str(tmp_path / "ca.crt")), timeout=10) as answer:
                    return answer.status
            except urllib.error.HTTPError as err:
                return err.code

        allowed = [("list", "pods"), ("watch", "pods"), ("get", "pods/log"), ("get", "pods/proxy"),
                   ("create", "pods/proxy")]
        refused = [("get", "secrets"), ("delete", "pods"), ("create", "pods"), ("list", "configmaps"),
                   ("create", "pods/exec"), ("create", "pods/portforward"), ("create", "pods/eviction")]
        assert [vr for vr in allowed if not can(*vr)] == []
        assert [vr for vr in refused if can(*vr)] == []
        assert not can("list", "pods", "default")
        assert api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods") == 200
        assert api("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets") == 403
        assert api("GET", "/api/v1/namespaces/kube-system/pods") == 403
        assert api("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/none") == 403
    finally:
        subprocess.run([*helm, "uninstall", release, "--wait"], capture_output=True, env={**os.environ, **env})


def test_admission_reads_the_real_clusters_quota_and_allocatable(cluster):
    """Admission on the kubernetes backend (orchestrator/backends/kube_admission.py) against the real
    API server: a namespace's ResourceQuota as the quota controller reports it (a pending pod already
    counted as used), and the node's allocatable as its kubelet reports it. A run beyond either is
    refused with the figures and the node count that fits, and creates nothing."""
    from orchestrator.backends import kube_admission

    state, env = cluster
    ns = "peerlab-admission"
    kubectl(env, "create", "namespace", ns)
    try:
        kubectl(env, "create", "quota", "lab-quota", "--hard=pods=7", "-n", ns)
        kubectl(env, "run", "pending", "-n", ns, "--image=peerlab.invalid/none", "--restart=Never",
                "--overrides", json.dumps({"spec": {"nodeSelector": {"peerlab.test/nowhere": "true"}}}))
        deadline = time.monotonic() + 60
        while True:  # the quota controller counts the pod (never scheduled: no node matches)
            quota = json.loads(kubectl(env, "get", "quota", "lab-quota", "-n", ns, "-o", "json").stdout)
            if (quota.get("status") or {}).get("used", {}).get("pods") == "1":
                break
            assert time.monotonic() < deadline, quota.get("status")
            time.sleep(1)
        run_env = {**os.environ, **env, "PEERLAB_K8S_NAMESPACE": ns}
        refused = peerlab("run", "scenarios/quickstart.yaml", "--backend", "kubernetes", "--namespace", ns,
                          "--set", "nodes.count=30", env=run_env)
        assert refused.returncode == 3, refused.stderr[-2000:]
        assert f"30 nodes (one pod each) do not fit namespace {ns}" in refused.stderr
        assert f"pods: 30 needed (1 per pod), 6 left in quota lab-quota of namespace {ns}" in refused.stderr
        assert "At most 6 nodes of this scenario fit (--set nodes.count=6)" in refused.stderr
        assert "Traceback" not in refused.stderr

        # no quota: the node's allocatable, as the kubelet reports it, bounds the run
        kubectl(env, "delete", "quota", "lab-quota", "-n", ns)
        nodes = json.loads(kubectl(env, "get", "nodes", "-o", "json").stdout)["items"]
        assert len(nodes) == NODES
        # the three kind nodes run on this machine's one kernel: its CPUs and memory count once
        assert len({n["status"]["nodeInfo"]["bootID"] for n in nodes}) == 1
        per_pod = kube_admission.pod_needs()

        def one(key: str) -> float:
            return float(kube_admission.quantity(nodes[0]["status"]["allocatable"][key]))
        pods = sum(float(kube_admission.quantity(n["status"]["allocatable"]["pods"])) for n in nodes)
        fit = min(int(one("cpu") / per_pod["cpu"] + 1e-9), int(one("memory") / 2**20 / per_pod["memory"] + 1e-9),
                  int(pods))
        assert 1 < fit < 5000
        refused = peerlab("run", "scenarios/quickstart.yaml", "--backend", "kubernetes", "--namespace", ns,
                          "--set", "nodes.count=5000", env=run_env)
        assert refused.returncode == 3, refused.stderr[-2000:]
        assert "left in the cluster's schedulable nodes (allocatable)" in refused.stderr
        assert f"At most {fit} nodes of this scenario fit (--set nodes.count={fit})" in refused.stderr
        # nothing created: the one pending pod, no release
        pods = json.loads(kubectl(env, "get", "pods", "-n", ns, "-o", "json").stdout)["items"]
        assert [p["metadata"]["name"] for p in pods] == ["pending"]
        releases = subprocess.run([str(ROOT / ".tools" / "bin" / "helm"), "list", "-n", ns, "-q"], capture_output=True,
                                  text=True, env={**os.environ, **env}, timeout=60)
        assert releases.returncode == 0 and releases.stdout.strip() == "", releases
    finally:
        kubectl(env, "delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
