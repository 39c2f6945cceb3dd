"""The orchestrator's image, for a run whose orchestrator is a Job in the cluster (the chart's
experiment mode: `helm install ... --set-file scenario=...`, docs/backends.md#an-experiment-in-the-cluster).

    peerlab-orchestrator:<hash>   this checkout's node image, plus the run's Python packages
                                  (orchestrator/requirements-in-cluster.txt), orchestrator/, charts/
                                  and the helm binary; `peerlab run` is its entry point

Built from a context of its own (the node image's .dockerignore keeps the orchestrator out of that
one), named by the hash of everything copied in: a second build builds nothing.
May import: orchestrator.builds.node_image, orchestrator.helm (helm's path), node.paths; never
orchestrator.backends (backends import builds).
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from node.paths import ROOT
from orchestrator.builds import node_image
from orchestrator.helm import helm_binary

REPOSITORY = "peerlab-orchestrator"
REQUIREMENTS = ROOT / "orchestrator" / "requirements-in-cluster.txt"
FOLDERS = ("orchestrator", "charts")
DOCKERFILE = """FROM {node}
USER 0:0
COPY requirements.txt /tmp/requirements.txt
RUN /opt/peerlab/bin/pip install --no-cache-dir --disable-pip-version-check -q -r /tmp/requirements.txt \\
 && rm /tmp/requirements.txt
COPY app /opt/peerlab/app
RUN python3 -m compileall -q /opt/peerlab/app >/dev/null
ENV HOME=/tmp PEERLAB_CACHE=/tmp/peerlab-cache {images}
USER 10001:10001
ENTRYPOINT ["python3", "-m", "orchestrator.cli"]
"""


def _files() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts]


def node_images(base: str | None = None) -> dict[str, str]:
    """The images the run's pods are made of, as the backend reads them (PEERLAB_IMAGE,
    PEERLAB_IMAGE_<ADAPTER>): this checkout's, which the Job's own copy of node/ cannot recompute
    (the node image holds node/ without its Dockerfile and build files)."""
    from node.adapters import IMPLEMENTATIONS, PEERLAB

    return {("PEERLAB_IMAGE" if name == PEERLAB else "PEERLAB_IMAGE_" + name.upper().replace("-", "_")):
            node_image.image_tag(base, name) for name in IMPLEMENTATIONS}


def image_tag(base: str | None = None, helm: Path | None = None) -> str:
    helm = helm or Path(helm_binary())
    digest = hashlib.sha256(" ".join(f"{k}={v}" for k, v in sorted(node_images(base).items())).encode())
    digest.update(REQUIREMENTS.read_bytes())
    digest.update(f"helm {helm.stat().st_size} {int(helm.stat().st_mtime)}".encode())
    for path in _files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def build(client, base: str | None = None, say: Callable[[str], None] = print) -> str:
    """The image in the Docker engine (the node image first if missing); its tag."""
    helm = Path(helm_binary())
    tag = image_tag(base, helm)
    if node_image.present(client, tag):
        return tag
    node = node_image.build(client, base, say=say)
    say(f"  building {tag} (the orchestrator, for a run inside the cluster: {node} with the run's packages, "
        "orchestrator/, charts/ and helm)")
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        for path in _files():
            dest = context / "app" / path.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        tools = context / "app" / ".tools" / "bin"
        tools.mkdir(parents=True)
        shutil.copy2(helm, tools / "helm")
        shutil.copy2(REQUIREMENTS, context / "requirements.txt")
        images = " ".join(f"{k}={v}" for k, v in sorted(node_images(base).items()))
        (context / "Dockerfile").write_text(DOCKERFILE.format(node=node, images=images))
        failed = node_image.build_context(tag, context)
    if failed:
        raise RuntimeError(f"docker build of {tag} failed: {failed}")
    return tag
