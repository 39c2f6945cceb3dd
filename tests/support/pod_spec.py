"""A pod of the chart (charts/peerlab, rendered by the real helm) run as Docker containers, the way a
kubelet would run it: each container with its image, command, env, user, capabilities, read-only
root, no privilege escalation and memory limit, its emptyDir and configMap volumes, all in the
network namespace of the first container (a pod's shared namespace). Not a cluster: no scheduler,
no API server, no probes; what only a real cluster checks is said in docs/backends.md."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from orchestrator.backends.kube_cluster import CHART
from orchestrator.helm import helm_binary

UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def render(values: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    (tmp / "values.yaml").write_text(yaml.safe_dump(values))
    out = subprocess.run([helm_binary(), "template", "r", str(CHART), "--namespace", "peerlab", "-f",
                          str(tmp / "values.yaml")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _bytes(quantity: str) -> int:
    for unit, factor in UNITS.items():
        if quantity.endswith(unit):
            return int(quantity[:-len(unit)]) * factor
    return int(quantity)


def container_kwargs(container: dict[str, Any], volumes: dict[str, Any], docs: list[dict[str, Any]],
                     tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    """docker-py `containers.run` arguments for one container of a pod spec (`env`: values for its
    valueFrom entries, which need the API server)."""
    sec = container.get("securityContext", {})
    caps = sec.get("capabilities", {})
    kwargs: dict[str, Any] = {
        "image": container["image"], "entrypoint": container["command"], "command": container.get("args"),
        "environment": {e["name"]: e.get("value", env.get(e["name"], "")) for e in container.get("env", [])},
        "cap_drop": caps.get("drop"), "cap_add": caps.get("add"),
        "read_only": bool(sec.get("readOnlyRootFilesystem")), "tmpfs": {}, "volumes": {},
    }
    if "runAsUser" in sec:
        kwargs["user"] = f"{sec['runAsUser']}:{sec.get('runAsGroup', sec['runAsUser'])}"
    if sec.get("allowPrivilegeEscalation") is False:
        kwargs["security_opt"] = ["no-new-privileges"]
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    if limit:
        kwargs["mem_limit"] = _bytes(limit)
    uid = sec.get("runAsUser", 0)
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:  # writable by the pod's users, as an emptyDir is
            kwargs["tmpfs"][mount["mountPath"]] = f"uid={uid},gid={sec.get('runAsGroup', uid)}"
        elif "configMap" in volume:
            (config,) = [d for d in docs if d["kind"] == "ConfigMap"
                         and d["metadata"]["name"] == volume["configMap"]["name"]]
            folder = tmp / volume["configMap"]["name"]
            folder.mkdir(exist_ok=True)
            for name, text in config["data"].items():
                (folder / name).write_text(text)
            kwargs["volumes"][str(folder)] = {"bind": mount["mountPath"], "mode": "ro"}
        else:
            raise AssertionError(f"volume {mount['name']}: a kind this stand-in does not make")
    return kwargs


def run_pod(client, statefulset: dict[str, Any], docs: list[dict[str, Any]], tmp: Path, labels: dict[str, str],
            env: dict[str, str] | None = None, ordinal: int = 0, network: str | None = None) -> dict[str, Any]:
    """Start pod `ordinal` of the StatefulSet as containers (by container name), attached to the Docker
    `network` if given; the caller removes them (by `labels`)."""
    spec = statefulset["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    pod = f"{statefulset['metadata']['name']}-{ordinal}"
    started: dict[str, Any] = {}
    for container in spec["containers"]:
        kwargs = container_kwargs(container, volumes, docs, tmp, {"POD_NAME": pod, **(env or {})})
        if started:
            kwargs["network_mode"] = f"container:{next(iter(started.values())).id}"
        elif network:
            kwargs["network"] = network
        started[container["name"]] = client.containers.run(**kwargs, detach=True, labels=labels,
                                                           name=f"{pod}-{container['name']}")
    return started
