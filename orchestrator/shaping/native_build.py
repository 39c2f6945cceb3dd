"""The native delay line's binary (orchestrator/shaping/native/*.c), built once per version of its
sources into the user's cache, outside the checkout: `~/.cache/peerlab/bin/peerlab-delayline-<hash>`
(or under $PEERLAB_CACHE). A fresh clone, another worktree or a second `make setup` builds nothing
while the sources are unchanged; a changed source gets a binary of its own.

`make setup` runs its `main` (it prints the binary's path). This
module needs only the standard library, so that an image's build stage can run it as a plain script.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "native"
NAME = "peerlab-delayline"
CC = "gcc"
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11"]
LIBS = ["-lnetfilter_queue", "-lmnl", "-ljansson", "-pthread"]
# what a failed compile or link names -> the Debian package that has it
PACKAGES = {"libnetfilter_queue": "libnetfilter-queue-dev", "-lnetfilter_queue": "libnetfilter-queue-dev",
            "-lnfnetlink": "libnfnetlink-dev", "libmnl": "libmnl-dev", "-lmnl": "libmnl-dev",
            "jansson": "libjansson-dev", "stdio.h": "libc6-dev", "crt1.o": "libc6-dev"}


class BuildError(RuntimeError):
    """The binary is missing and could not be built; the message names what to install."""


def cache_dir() -> Path:
    return Path(os.environ.get("PEERLAB_CACHE") or Path.home() / ".cache" / "peerlab") / "bin"


def digest() -> str:
    """A hash of everything the binary is made of: the sources, the compiler and its flags."""
    h = hashlib.sha256(" ".join([CC, *CFLAGS, *LIBS]).encode())
    for source in sorted(SOURCES.iterdir()):
        if source.suffix in (".c", ".h"):
            h.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def path(build: bool = True) -> Path:
    """The binary for these sources, built first if it is not in the cache yet (unless `build` is false)."""
    target = cache_dir() / f"{NAME}-{digest()}"
    if build and not os.access(target, os.X_OK):
        _build(target)
    return target


def _build(target: Path) -> None:
    if not shutil.which(CC):
        raise BuildError(f"building the delay line needs a C compiler: apt-get install {CC} libc6-dev "
                         "libnetfilter-queue-dev libmnl-dev libjansson-dev")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")  # builds side by side never meet
    sources = sorted(str(p) for p in SOURCES.glob("*.c"))
    done = subprocess.run([CC, *CFLAGS, "-o", str(partial), *sources, *LIBS], capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        missing = sorted({pkg for needle, pkg in PACKAGES.items() if needle in done.stderr})
        hint = (f"install {' '.join(missing)} (apt-get install {' '.join(missing)}, or make setup)" if missing
                else "the compiler said:")
        raise BuildError(f"building the delay line ({SOURCES}) failed: {hint}\n{done.stderr.strip()[-3000:]}")
    os.replace(partial, target)


def main() -> int:
    try:
        print(path())
    except BuildError as err:
        print(f"peerlab: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
