"""The shaping daemon in the local cluster: charts/peerlab-shaper (a DaemonSet, one pod per cluster
node) installed by `peerlab cluster up`, from an image built here.

    image      peerlab-shaper:<hash>        this checkout's peerlab node image (orchestrator/shaping,
                                            the native delay line) with the pinned crictl, which the
                                            daemon asks for a pod's network namespace (the CRI)
    release    peerlab-shaper, namespace peerlab-system   `helm upgrade --install`
    reached    by exec into its pod on a cluster node (kube_cluster.KubeCluster.shaper_lines): no port

May import: orchestrator.builds, orchestrator.backends (docker's client), orchestrator.helm,
orchestrator.cluster (kind, layout, node_image, programs, rt_budget), node.paths.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from node.paths import ROOT
from orchestrator.builds import node_image
from orchestrator.cluster import kind, programs, rt_budget
from orchestrator.cluster.layout import Layout
from orchestrator.cluster.node_image import has as docker_has

CHART = ROOT / "charts" / "peerlab-shaper"
RELEASE = "peerlab-shaper"
NAMESPACE = "peerlab-system"
LABEL = "app.kubernetes.io/name=peerlab-shaper"
READY_TIMEOUT_S = 180


class ShaperError(RuntimeError):
    """The daemon's image could not be built, or its release not installed or ready."""


def image_tag(node_tag: str, crictl: Path) -> str:
    digest = hashlib.sha256(f"{node_tag}\0{crictl.name}".encode()).hexdigest()
    return f"peerlab-shaper:{digest[:12]}"


def build_image(say: Callable[[str], None] = print, base: str | None = None) -> str:
    """The daemon's image in the Docker engine (built once per node image and crictl, the node image
    first if it is missing); its tag."""
    node_tag = node_image.image_tag(base)
    if not docker_has(node_tag):
        from orchestrator.backends.docker import docker_client
        try:
            node_image.build(docker_client(), base, say=say)
        except RuntimeError as err:
            raise ShaperError(f"the node image {node_tag} could not be built: {err}") from None
    try:
        crictl = programs.locate_one("crictl")
    except programs.MissingProgram as err:
        raise ShaperError(str(err)) from None
    tag = image_tag(node_tag, crictl)
    if docker_has(tag):
        return tag
    say(f"  building {tag} (the shaping daemon: {node_tag} with crictl)")
    with tempfile.TemporaryDirectory(dir=crictl.parent) as tmp:
        os.link(crictl, Path(tmp) / "crictl")
        Path(tmp, "Dockerfile").write_text(f"FROM {node_tag}\nUSER 0:0\nCOPY crictl /usr/local/bin/crictl\n")
        failed = node_image.build_context(tag, tmp)
    if failed:
        raise ShaperError(f"docker build of {tag} failed: {failed}")
    return tag


def _helm(s: Layout, *args: str) -> subprocess.CompletedProcess:
    from orchestrator.helm import helm
    return helm(*args, namespace=NAMESPACE, kubeconfig=s.kubeconfig)


def ready(api) -> dict[str, bool]:
    """cluster node -> whether its daemon pod is Ready."""
    from kubernetes import client
    pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, label_selector=LABEL, _request_timeout=10).items
    return {p.spec.node_name: any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in pods if p.spec.node_name}


def up(s: Layout, api, nodes: int, say: Callable[[str], None] = print) -> None:
    """Build and load the image, install or upgrade the release, wait for a Ready daemon on every node."""
    started = time.monotonic()
    tag = build_image(say)
    try:
        kind.load([tag], say)
    except kind.KindError as err:
        raise ShaperError(str(err)) from None
    realtime = ["--set", f"realtime.cpuCgroup={rt_budget.CPU}"] if rt_budget.applies() else []
    done = _helm(s, "upgrade", "--install", RELEASE, str(CHART), "--create-namespace",
                 "--set", f"image.tag={tag.split(':', 1)[1]}", *realtime)
    if done.returncode != 0:
        raise ShaperError(f"helm upgrade --install {RELEASE} failed: {done.stderr.strip()[-800:]}")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        found = ready(api)
        if len(found) == nodes and all(found.values()):
            break
        if time.monotonic() > deadline:
            raise ShaperError(f"the shaping daemon is not Ready on every node after {READY_TIMEOUT_S} s ({found}): "
                              f"kubectl -n {NAMESPACE} describe pods -l {LABEL}")
        time.sleep(1)
    say(f"shaping daemon up on {nodes} nodes in {time.monotonic() - started:.0f} s (release {RELEASE}, "
        f"namespace {NAMESPACE})")
