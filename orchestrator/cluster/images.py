"""Images in the local cluster's container runtime. No registry is reachable here, so every image a
pod runs is built by the Docker engine on this machine and imported into containerd's k8s.io namespace
(`docker save | ctr images import`), as `kind load docker-image` does for kind:

    peerlab.local/pause:1      the pods' sandbox (images/pause.c, built static with gcc)
    peerlab-node:<hash>, peerlab-<adapter>:<hash>   the node images (`peerlab image build`)
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from orchestrator.cluster import layout as L
from orchestrator.cluster.layout import Layout

PAUSE_SOURCE = Path(__file__).resolve().parent / "images" / "pause.c"


class ImageError(RuntimeError):
    """An image could not be built or imported; the message says which and why."""


def _ctr(s: Layout, ctr: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(ctr), "--address", str(s.containerd_socket), "--namespace", L.NAMESPACE, *args],
                          capture_output=True, **kw)


def present(s: Layout, ctr: Path) -> set[str]:
    """The names of the images in the cluster's runtime, as the CRI normalises them
    (peerlab-node:abc is docker.io/library/peerlab-node:abc)."""
    done = _ctr(s, ctr, "images", "list", "--quiet", text=True)
    return set(done.stdout.split()) if done.returncode == 0 else set()


def normalised(tag: str) -> str:
    name = tag if "/" in tag.split(":")[0] else f"library/{tag}"
    return name if "." in name.split("/")[0] or ":" in name.split("/")[0] else f"docker.io/{name}"


def docker_has(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def build_pause() -> None:
    """The sandbox image, into the Docker engine (once)."""
    if docker_has(L.PAUSE_IMAGE):
        return
    if not shutil.which("gcc"):
        raise ImageError("building the pods' sandbox image needs gcc (apt-get install gcc libc6-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(["gcc", "-static", "-Os", "-o", f"{tmp}/pause", str(PAUSE_SOURCE)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageError(f"gcc could not build the sandbox process (needs libc6-dev): {done.stderr[-500:]}")
        Path(tmp, "Dockerfile").write_text('FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n')
        done = subprocess.run(["docker", "build", "-q", "-t", L.PAUSE_IMAGE, tmp], capture_output=True, text=True)
        if done.returncode != 0:
            raise ImageError(f"docker build of {L.PAUSE_IMAGE} failed: {done.stderr.strip()[-500:]}")


def load(s: Layout, ctr: Path, tags: list[str], say: Callable[[str], None] = print) -> list[str]:
    """Import the Docker engine's images `tags` into the cluster's runtime (those not there yet); the
    ones imported. An image Docker does not have is an ImageError naming how to build it."""
    have = present(s, ctr)
    todo = [t for t in tags if normalised(t) not in have]
    missing = [t for t in todo if not docker_has(t)]
    if missing:
        raise ImageError(f"the Docker engine has no image {', '.join(missing)}: build it first "
                         "(`peerlab image build --implementation all` builds the node images)")
    for tag in todo:
        say(f"  importing {tag} into the cluster's container runtime")
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
        done = _ctr(s, ctr, "images", "import", "-", stdin=save.stdout)
        save.stdout.close()
        if save.wait() != 0 or done.returncode != 0:
            raise ImageError(f"importing {tag} failed: {done.stderr.decode(errors='replace').strip()[-500:]}")
    return todo
