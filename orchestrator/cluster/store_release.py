"""The bundled S3 store inside the local cluster: the pinned SeaweedFS `weed` (orchestrator/store/
s3server.py) in a pod of charts/peerlab-store, installed by `peerlab cluster up`, so that runs on the
cluster store their logs in the cluster and `peerlab report s3://...` reads them from there.

    image      peerlab-seaweedfs:<hash>     the weed binary on the node images' base, built by the
                                            Docker engine here and loaded into the nodes (no registry)
    secret     peerlab-store/peerlab-store-credentials   the store's one identity, drawn at the first
                                            up and kept in <state>/store/credentials.env (mode 0600)
               peerlab/peerlab-store        a client's settings from a pod (endpoint, keys, region): an
                                            experiment's Job reads them (charts/peerlab experiment.storeSecret)
    release    peerlab-store, namespace peerlab-store    `helm upgrade --install`: an up again changes nothing
    data       <state>/store/data on the host, mounted into the control-plane node (kind.config), where
               the pod runs (a hostPath): kept across down and up, gone with --purge
    endpoint   http://<control-plane node's address>:30833 from the host (a NodePort),
               http://peerlab-store.peerlab-store.svc:8333 from pods
"""
from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from node.paths import ROOT
from orchestrator.builds import node_image
from orchestrator.cluster import kind
from orchestrator.cluster import layout as L
from orchestrator.cluster.layout import Layout
from orchestrator.cluster.node_image import has as docker_has
from orchestrator.store import s3server
from orchestrator.store.durable import write_private

CHART = ROOT / "charts" / "peerlab-store"
RELEASE = NAMESPACE = "peerlab-store"
SECRET = "peerlab-store-credentials"
CLIENT_SECRET = "peerlab-store"  # in the runs' namespace: the store client's settings from a pod
RUNS_NAMESPACE = "peerlab"       # kube_cluster.settings()' default
NODE_PORT = 30833
S3_PORT = 8333
BUCKET = "peerlab"
REGION = "us-east-1"
READY_TIMEOUT_S = 180


class StoreError(RuntimeError):
    """The bundled store could not be built, installed or reached; the message says which and why."""


def directory(s: Layout) -> Path:
    return s.root / "store"


def credentials_file(s: Layout) -> Path:
    return directory(s) / "credentials.env"


def endpoint() -> str:
    return f"http://{kind.node_address(L.CONTROL_PLANE) or '127.0.0.1'}:{NODE_PORT}"


def in_cluster_endpoint() -> str:
    return f"http://{RELEASE}.{NAMESPACE}.svc:{S3_PORT}"


def image_tag(binary: Path, base: str) -> str:
    """Named by the binary (its file name is a hash of the pin and the Go version) and the base."""
    digest = hashlib.sha256(binary.name.encode() + b"\0" + base.encode()).hexdigest()
    return f"peerlab-seaweedfs:{digest[:12]}"


def build_image(say: Callable[[str], None]) -> str:
    """The store's image in the Docker engine (built once per binary and base); its tag."""
    try:
        binary = s3server.weed(build=True)
    except Exception as err:  # noqa: BLE001 - a Go build's failure, named
        raise StoreError(f"the S3 server's binary could not be built: {err}") from None
    base = node_image.base_image()
    tag = image_tag(binary, base)
    if docker_has(tag):
        return tag
    say(f"  building {tag} (SeaweedFS on {base}, once)")
    with tempfile.TemporaryDirectory(dir=binary.parent) as tmp:
        os.link(binary, Path(tmp) / "weed")  # same file system: no copy of its 230 MB
        Path(tmp, "Dockerfile").write_text(f"FROM {base}\nCOPY weed /usr/local/bin/weed\n")
        failed = node_image.build_context(tag, tmp)
    if failed:
        raise StoreError(f"docker build of {tag} failed: {failed}\n(is the base image {base} "
                         "there? without a registry, build one with .ci/docker-base and set "
                         "PEERLAB_BASE_IMAGE=peerlab-base:bookworm)")
    return tag


def credentials(s: Layout) -> dict[str, str]:
    """The store's identity and where to reach it, as a client's environment (boto3 and peerlab read
    these); drawn at the first up and kept in credentials.env."""
    path = credentials_file(s)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"export AWS_ACCESS_KEY_ID=peerlab-{secrets.token_hex(4)}\n"
                    f"export AWS_SECRET_ACCESS_KEY={secrets.token_urlsafe(24)}\n")
    keys = dict(line.removeprefix("export ").split("=", 1) for line in path.read_text().split("\n") if "=" in line)
    return {"AWS_ENDPOINT_URL": endpoint(), "AWS_ACCESS_KEY_ID": keys["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": keys["AWS_SECRET_ACCESS_KEY"], "AWS_DEFAULT_REGION": REGION}


def write_env(s: Layout) -> Path:
    """credentials.env with the endpoint too (the node's address may change between ups): `. FILE`."""
    env = credentials(s)
    path = credentials_file(s)
    write_private(path, "".join(f"export {k}={v}\n" for k, v in env.items()))
    return path


def _put_secret(core, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> None:
    """The Secret `name` in `namespace` (both made if missing; the namespace with `labels`) holding `data`."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"metadata": {"name": namespace, "labels": labels or {}}}, _request_timeout=10)
    except ApiException as err:
        if err.status != 409:
            raise
    body = {"metadata": {"name": name}, "type": "Opaque", "stringData": data}
    try:
        core.create_namespaced_secret(namespace, body, _request_timeout=10)
    except ApiException as err:
        if err.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body, _request_timeout=10)


def _secrets(s: Layout, api) -> None:
    """The store's own identity (its pod reads it), and the client's settings for runs inside the
    cluster (CLIENT_SECRET in the runs' namespace: the chart's experiment.storeSecret)."""
    from kubernetes import client

    from orchestrator.backends.kube_cluster import PSA_ENFORCE

    core = client.CoreV1Api(api)
    env = credentials(s)
    _put_secret(core, NAMESPACE, SECRET, {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    # the runs' namespace as a run makes it (kube_cluster.ensure_namespace), if it is not there yet
    _put_secret(core, RUNS_NAMESPACE, CLIENT_SECRET, {**env, "AWS_ENDPOINT_URL": in_cluster_endpoint()},
                {PSA_ENFORCE: "restricted", "pod-security.kubernetes.io/warn": "restricted"})


def _helm(s: Layout, *args: str) -> subprocess.CompletedProcess:
    from orchestrator.helm import helm
    return helm(*args, namespace=NAMESPACE, kubeconfig=s.kubeconfig)


def answers(s: Layout, timeout: float = 3.0) -> bool:
    """Whether the store takes a write now (through its NodePort, as a run on this host reaches it)."""
    import boto3
    from botocore.config import Config

    env = credentials(s)
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=REGION,
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                          config=Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1}))
    try:
        if BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
            client.create_bucket(Bucket=BUCKET)
        # up means it stores: the gateway lists buckets before its volumes take writes
        client.put_object(Bucket=BUCKET, Key=".peerlab-ready", Body=b"")
        client.delete_object(Bucket=BUCKET, Key=".peerlab-ready")
        return True
    except Exception:  # noqa: BLE001 - not listening yet, or not ready to store
        return False


def up(s: Layout, api, say: Callable[[str], None] = print) -> None:
    """Build and load the image, create the secret, install or keep the release, and wait until
    the store takes writes (bucket `peerlab` created). `api`: a kubernetes ApiClient of the cluster."""
    started = time.monotonic()
    tag = build_image(say)
    try:
        kind.load([tag], say, nodes=[L.CONTROL_PLANE])  # its one pod runs there
    except kind.KindError as err:
        raise StoreError(str(err)) from None
    s.store_data.mkdir(parents=True, exist_ok=True)
    _secrets(s, api)
    done = _helm(s, "upgrade", "--install", RELEASE, str(CHART), "--set", f"image.tag={tag.split(':', 1)[1]}",
                 "--set", f"credentialsSecret={SECRET}", "--set", f"storage.hostPath={L.STORE_MOUNT}",
                 "--set-string", f"nodeSelector.kubernetes\\.io/hostname={L.CONTROL_PLANE}",
                 "--set", f"service.nodePort={NODE_PORT}", "--set", f"service.port={S3_PORT}")
    if done.returncode != 0:
        raise StoreError(f"helm upgrade --install {RELEASE} failed: {done.stderr.strip()[-800:]}")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not answers(s):
        if time.monotonic() > deadline:
            raise StoreError(f"the store does not take writes at {endpoint()} after {READY_TIMEOUT_S} s: "
                             f"kubectl -n {NAMESPACE} describe pod; kubectl -n {NAMESPACE} logs deploy/{RELEASE}")
        time.sleep(1)
    env_file = write_env(s)
    say(f"S3 store up in {time.monotonic() - started:.0f} s: {endpoint()} (pods: {in_cluster_endpoint()}), "
        f"bucket {BUCKET}; its client settings: . {env_file}")
