"""kind, the way peerlab drives it: the cluster's configuration, and the `kind` program (pinned,
built by programs.py) to create, delete, list and load images into the cluster.

The configuration (one page, `config`): one control-plane node and N-1 workers from the node image
built here (node_image.py); kubeadm told where the control plane's images are (no registry) and the
kubelet told to accept cgroup v1 (this machine's); the store's data directory of the host mounted
into the control-plane node. Nodes are containers of the Docker engine on network peerlab-kind.
May import: orchestrator.cluster.layout, orchestrator.cluster.node_image, orchestrator.cluster.programs.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from orchestrator.cluster import layout as L
from orchestrator.cluster import node_image, programs
from orchestrator.cluster.layout import Layout


class KindError(RuntimeError):
    """kind failed; the message has what it said."""


def config(s: Layout, nodes: int) -> dict:
    """The kind cluster's configuration for `nodes` cluster nodes (the first the control plane)."""
    versions = node_image.versions()
    control_plane = {"role": "control-plane",
                     "extraMounts": [{"hostPath": str(s.store_data), "containerPath": L.STORE_MOUNT}]}
    return {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": L.NAME,
        "networking": {"podSubnet": L.POD_CIDR, "serviceSubnet": L.SERVICE_CIDR},
        "nodes": [control_plane] + [{"role": "worker"}] * (nodes - 1),
        "kubeadmConfigPatches": [
            yaml.safe_dump({"kind": "ClusterConfiguration", "imageRepository": node_image.IMAGE_REPOSITORY,
                            "etcd": {"local": {"imageTag": versions["etcd"]}},
                            "dns": {"imageTag": versions["coredns"]}}),
            # cgroup v1 (accepted until Kubernetes 1.35); no swap accounting; images never collected:
            # every one is built and loaded here, none could be pulled back
            yaml.safe_dump({"kind": "KubeletConfiguration", "failSwapOn": False, "failCgroupV1": False,
                            "imageGCHighThresholdPercent": 100}),
        ],
    }


def _env() -> dict[str, str]:
    return {**os.environ, "KIND_EXPERIMENTAL_DOCKER_NETWORK": L.NETWORK}


def binary() -> Path:
    try:
        return programs.locate_one("kind")
    except programs.MissingProgram as err:
        raise KindError(str(err)) from None


def run(*args: str, timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(binary()), *args], capture_output=True, text=True, env=_env(), timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise KindError(f"kind {' '.join(args[:2])} failed:\n{(done.stderr or done.stdout).strip()[-2500:]}")
    return done


def exists() -> bool:
    return L.NAME in run("get", "clusters", check=False).stdout.split()


def node_containers() -> list[str]:
    """The Docker containers of the cluster's nodes (running or not)."""
    done = subprocess.run(["docker", "ps", "-a", "--filter", f"label={L.LABEL}={L.NAME}", "--format", "{{.Names}}"],
                          capture_output=True, text=True)
    return sorted(done.stdout.split())


def node_address(node: str) -> str | None:
    """The node container's address on the cluster's network (its InternalIP)."""
    done = subprocess.run(["docker", "inspect", node], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    networks = json.loads(done.stdout)[0]["NetworkSettings"]["Networks"]
    return (networks.get(L.NETWORK) or {}).get("IPAddress") or None


def create(s: Layout, nodes: int, image: str) -> None:
    s.store_data.mkdir(parents=True, exist_ok=True)
    s.kind_config.write_text(yaml.safe_dump(config(s, nodes), sort_keys=False))
    run("create", "cluster", "--name", L.NAME, "--image", image, "--config", str(s.kind_config),
        "--kubeconfig", str(s.kubeconfig), "--wait", "120s", timeout=900)


def kubeconfig(s: Layout) -> Path:
    """(Re)write the cluster's admin kubeconfig into the state directory."""
    done = run("get", "kubeconfig", "--name", L.NAME)
    s.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(s.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(done.stdout)
    return s.kubeconfig


def delete(s: Layout) -> None:
    run("delete", "cluster", "--name", L.NAME, "--kubeconfig", str(s.kubeconfig), timeout=300)


def images_on_nodes() -> dict[str, set[str]]:
    """node -> the image references its containerd holds."""
    found = {}
    for node in node_containers():
        done = subprocess.run(["docker", "exec", node, "ctr", "-n", "k8s.io", "images", "list", "-q"],
                              capture_output=True, text=True)
        found[node] = set(done.stdout.split()) if done.returncode == 0 else set()
    return found


def normalised(tag: str) -> str:
    """A tag as containerd's CRI names it (peerlab-node:abc is docker.io/library/peerlab-node:abc)."""
    name = tag if "/" in tag.split(":")[0] else f"library/{tag}"
    return name if "." in name.split("/")[0] or ":" in name.split("/")[0] else f"docker.io/{name}"


def load(tags: list[str], say=print, nodes: list[str] | None = None) -> list[str]:
    """`kind load docker-image` of the tags some node (of `nodes`, default all) lacks; the ones loaded."""
    held = {node: have for node, have in images_on_nodes().items() if nodes is None or node in nodes}
    todo = [t for t in tags if not all(normalised(t) in have for have in held.values())]
    missing = [t for t in todo if not node_image.has(t)]
    if missing:
        raise KindError(f"the Docker engine has no image {', '.join(missing)}: build it first "
                        "(`peerlab image build --implementation all` builds the node images)")
    if todo:  # one call: one archive of them all, imported into the nodes side by side
        say(f"  loading {', '.join(todo)} into the cluster's nodes" + (f" {', '.join(nodes)}" if nodes else ""))
        run("load", "docker-image", "--name", L.NAME, *(["--nodes", ",".join(nodes)] if nodes else []), *todo,
            timeout=1200)
    return todo
