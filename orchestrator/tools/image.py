"""The node image: its content tag, and building it with the Docker engine (`peerlab image build`).

The tag is a hash of everything the image holds (node/, the shaper's files, the Dockerfile) and of
the base image's name, so a changed node is never run from a stale image: the Docker backend builds
the image when its tag is missing.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

from orchestrator.paths import ROOT

DOCKERFILE = "node/Dockerfile"
REPOSITORY = "peerlab-node"
DEFAULT_BASE = "python:3.12-slim"
SHAPER_FILES = ("orchestrator/__init__.py", "orchestrator/shaping/__init__.py", "orchestrator/shaping/__main__.py")


def base_image() -> str:
    """The base the Dockerfile builds FROM: $PEERLAB_BASE_IMAGE, else python:3.12-slim."""
    return os.environ.get("PEERLAB_BASE_IMAGE") or DEFAULT_BASE


def _content_files() -> list[Path]:
    files = [p for p in sorted((ROOT / "node").rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return files + [ROOT / f for f in SHAPER_FILES]


def image_tag(base: str | None = None) -> str:
    digest = hashlib.sha256((base or base_image()).encode())
    for path in _content_files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def build(client, base: str | None = None, say: Callable[[str], None] = print) -> str:
    """Build the node image (unless its tag exists); its tag. `client`: a docker.DockerClient."""
    import docker.errors

    base = base or base_image()
    tag = image_tag(base)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    say(f"building the node image {tag} from {base} (once per change of node/)")
    log: list[str] = []
    for chunk in client.api.build(path=str(ROOT), dockerfile=DOCKERFILE, tag=tag, buildargs={"BASE_IMAGE": base},
                                  rm=True, forcerm=True, decode=True):
        if "error" in chunk:
            raise RuntimeError(f"building {tag} failed: {chunk['error'].strip()}\n" + "".join(log[-15:]) +
                               (f"\n(is the base image {base} there? without a registry, build one with "
                                ".ci/docker-base and set PEERLAB_BASE_IMAGE=peerlab-base:bookworm)"))
        line = chunk.get("stream", "")
        log.append(line)
        if line.startswith("Step "):
            say("  " + line.strip())
    client.images.get(tag)
    return tag
