"""The node images: their content tags, and building them with the Docker engine (`peerlab image build`).

One image per implementation: peerlab's node (node/Dockerfile: the protocol node and the shaper) and
each adapter's (node/adapters/<name>/Dockerfile: the adapter and what it runs on; a compiled adapter's
program is built and installed first: orchestrator/builds/adapter_programs.py). A tag is a hash
of everything the image holds and of the base image's name, so a changed node is never run from a
stale image: the Docker backend builds an image when its tag is missing.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

from node.adapters import PEERLAB, get_adapter
from node.paths import ROOT

DOCKERFILE = "node/Dockerfile"
REPOSITORY = "peerlab-node"
DEFAULT_BASE = "python:3.12-slim"
SUPERVISOR_FILES = ("node/__init__.py", "node/supervisor.py")  # in every image: a pod's main process
# where an adapter's image keeps it, for the {tools} and {adapter} of its adapter.json command
IMAGE_TOOLS = "/opt/peerlab/tools"
IMAGE_ADAPTER = "/opt/peerlab/adapter"


def base_image() -> str:
    """The base the Dockerfiles build FROM: $PEERLAB_BASE_IMAGE, else python:3.12-slim."""
    return os.environ.get("PEERLAB_BASE_IMAGE") or DEFAULT_BASE


def _files(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and "node_modules" not in p.parts]


def _content_files(implementation: str) -> list[Path]:
    if implementation == PEERLAB:
        return _files(ROOT / "node") + [ROOT / "orchestrator" / "__init__.py"] + _files(ROOT / "orchestrator" / "shaping")
    return _files(get_adapter(implementation).directory) + [ROOT / f for f in SUPERVISOR_FILES]


def dockerfile(implementation: str = PEERLAB) -> str:
    if implementation == PEERLAB:
        return DOCKERFILE
    return str((get_adapter(implementation).directory / "Dockerfile").relative_to(ROOT))


def image_tag(base: str | None = None, implementation: str = PEERLAB) -> str:
    digest = hashlib.sha256((base or base_image()).encode())
    for path in _content_files(implementation):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    repository = REPOSITORY if implementation == PEERLAB else f"peerlab-{implementation}"
    return f"{repository}:{digest.hexdigest()[:12]}"


def build_context(tag: str, context: Path | str) -> str:
    """`docker build` of a prepared context (its Dockerfile and files) into `tag`, for the images
    built FROM the node image or the base (orchestrator, Spark, shaping daemon, S3 store). A failed
    build leaves no container behind (--force-rm). "" when built, else the end of its error output."""
    import subprocess

    done = subprocess.run(["docker", "build", "-q", "--force-rm", "-t", tag, str(context)], capture_output=True, text=True)
    return "" if done.returncode == 0 else (done.stderr.strip() or done.stdout.strip())[-800:]


def present(client, tag: str) -> bool:
    """Whether the Docker engine of `client` has the image `tag`."""
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build(client, base: str | None = None, say: Callable[[str], None] = print, implementation: str = PEERLAB) -> str:
    """Build the implementation's image (unless its tag exists); its tag. `client`: a docker.DockerClient."""

    from orchestrator.builds import adapter_programs

    if implementation in adapter_programs.PROGRAMS:  # the binary its Dockerfile copies, as its sources say now
        try:
            adapter_programs.install(implementation)
        except adapter_programs.ERRORS as err:
            raise RuntimeError(f"the {implementation} image needs its program: {err}") from None
    base = base or base_image()
    tag = image_tag(base, implementation)
    if present(client, tag):
        return tag
    say(f"building the {implementation} node image {tag} from {base} (once per change of {dockerfile(implementation).rsplit('/', 1)[0]}/)")
    log: list[str] = []
    for chunk in client.api.build(path=str(ROOT), dockerfile=dockerfile(implementation), tag=tag,
                                  buildargs={"BASE_IMAGE": base}, rm=True, forcerm=True, decode=True):
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
