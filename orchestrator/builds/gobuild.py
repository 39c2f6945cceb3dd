"""Programs built from published Go modules, pinned in the checkout, into the user's cache.

A pin is a directory with a go.mod that requires the program's module at one version (and repeats
its replace directives), a go.sum, and a tools.go that imports the program's package. `binary`
builds it once into `<cache>/bin/<name>-<hash>` (hash of go.mod, go.sum and the Go version), so a
fresh clone, another worktree or a second `make setup` builds nothing while the pin is unchanged.
Go's module and build caches (GOMODCACHE, GOCACHE) are outside the checkout as well; the first
build on a machine downloads and compiles everything (minutes), later ones reuse those caches.

A program of our own (a pin whose own .go files are the program, like the go-libp2p node adapter)
passes `own=True`: its .go files join the hash, so a changed source is rebuilt. `static=True` builds
without cgo (CGO_ENABLED=0: a binary that runs in any image).
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from node.paths import cache_root
from orchestrator.builds import progress


class GoBuildError(RuntimeError):
    """The program is missing and could not be built; the message says why and what to do."""


@functools.cache
def _go_version() -> str:  # asked once per process: locating the cluster's eight programs asks eight times
    done = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def go_version() -> str:
    """The Go toolchain's version (`go1.26.8`), or empty without Go."""
    return _go_version() if shutil.which("go") else ""


def _sources(pin: Path) -> list[Path]:
    """A program's own Go files: every .go file under its pin (sorted, so the hash is stable)."""
    return sorted(p for p in pin.rglob("*.go") if p.is_file())


def binary(pin: Path, package: str, name: str, build: bool = True, ldflags: str = "", own: bool = False,
           static: bool = False) -> Path:
    """The program `package` as pinned in `pin`, built first unless it is cached (or `build` is false:
    then the path it would have, which may not exist); `ldflags` as `go build -ldflags` takes them
    (a release's version stamp, which its own build scripts set); `own`: the pin's .go files are the
    program's sources, hashed too; `static`: built with CGO_ENABLED=0."""
    go = shutil.which("go")
    h = hashlib.sha256(package.encode() + b"\0" + ldflags.encode())
    for f in ("go.mod", "go.sum"):
        h.update(f.encode() + b"\0" + (pin / f).read_bytes() + b"\0")
    for path in _sources(pin) if own else ():  # (published programs' hashes stay as they were)
        h.update(path.relative_to(pin).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    if static:
        h.update(b"CGO_ENABLED=0\0")
    h.update(_go_version().encode() if go else b"")
    target = cache_root() / "bin" / f"{name}-{h.hexdigest()[:16]}"
    if not build or os.access(target, os.X_OK):
        return target
    if not go:
        raise GoBuildError(f"building {name} needs Go 1.26 or newer (https://go.dev/doc/install, or "
                           "apt-get install golang-go where that is new enough)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")  # builds side by side never meet
    print(f"peerlab: building {name} from {package} as pinned in {pin} (the first time on a machine "
          "takes minutes: modules are downloaded and compiled)", file=sys.stderr, flush=True)
    env = _env(static)
    flags = ["-ldflags", ldflags] if ldflags else []
    done = progress.run(["go", "build", "-trimpath", *flags, "-o", str(partial), package], name, cwd=pin, env=env,
                        capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise GoBuildError(f"building {name} ({package}, pinned in {pin}) failed; go said:\n"
                           f"{done.stderr.strip()[-3000:]}")
    os.replace(partial, target)
    return target


def _env(static: bool) -> dict[str, str]:
    env = {**os.environ, "GOFLAGS": "-mod=readonly"}  # go.sum must pin everything: no silent updates
    if static:
        env["CGO_ENABLED"] = "0"
    return env


def test(pin: Path, static: bool = False) -> subprocess.CompletedProcess:
    """`go test` of a program of our own (its _test.go files), built as `binary` builds it."""
    if not shutil.which("go"):
        raise GoBuildError("testing needs Go 1.26 or newer")
    return subprocess.run(["go", "test", "-trimpath", "./..."], cwd=pin, env=_env(static), capture_output=True,
                          text=True)
