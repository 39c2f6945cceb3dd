"""Rust programs of the checkout (a crate with a committed Cargo.lock), built into the user's cache.

`binary` builds the crate's binary once, with `cargo build --release --locked` (the lock file must pin
every crate: no silent updates), into `<cache>/bin/<name>-<hash>`, the hash covering Cargo.toml,
Cargo.lock, build.rs, every file under src/ and `rustc --version`; so a fresh clone, another worktree or a second
`make setup` builds nothing while the sources and the toolchain are unchanged. Cargo's target
directory (`<cache>/cargo-target`) and its registry (CARGO_HOME, ~/.cargo) are outside the checkout as
well: the first build on a machine downloads and compiles every crate (minutes), a rebuild after a
change of the sources only the crate itself.
(orchestrator/builds/adapter_programs.py builds the rust-libp2p adapter's program with it.)
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from node.paths import cache_root
from orchestrator.builds import progress

HINT = ("Rust 1.88 or newer (https://rustup.rs; Debian's cargo package is older than that on bookworm); "
        "cargo is looked for on PATH and in ~/.cargo/bin")


class CargoBuildError(RuntimeError):
    """The program is missing and could not be built; the message says why and what to do."""


def _tool(name: str) -> str | None:
    """`cargo` or `rustc` on PATH, else where rustup puts it (CARGO_HOME/bin, ~/.cargo/bin)."""
    found = shutil.which(name)
    if found:
        return found
    home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    candidate = home / "bin" / name
    return str(candidate) if os.access(candidate, os.X_OK) else None


@functools.cache
def rustc_version() -> str:  # asked once per process
    """The Rust compiler's version (`rustc 1.95.0 (...)`), or empty without one."""
    rustc = _tool("rustc")
    if not rustc:
        return ""
    done = subprocess.run([rustc, "--version"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _sources(crate: Path) -> list[Path]:
    return [crate / "Cargo.toml", crate / "Cargo.lock", *([crate / "build.rs"] if (crate / "build.rs").exists() else []),
            *sorted(p for p in (crate / "src").rglob("*") if p.is_file() and "__pycache__" not in p.parts)]


def cached_path(crate: Path, name: str) -> Path:
    """Where the binary of these sources, built by this toolchain, is kept (it may not exist yet)."""
    h = hashlib.sha256(name.encode() + b"\0")
    for f in _sources(crate):
        h.update(f.relative_to(crate).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(rustc_version().encode())
    return cache_root() / "bin" / f"{name}-{h.hexdigest()[:16]}"


def binary(crate: Path, name: str, build: bool = True) -> Path:
    """The binary `name` of the crate at `crate`, built first unless it is cached (or `build` is
    false: then the path it would have, which may not exist)."""
    crate = Path(crate).resolve()
    target = cached_path(crate, name)
    if not build or os.access(target, os.X_OK):
        return target
    cargo = _tool("cargo")
    if not cargo or not rustc_version():
        raise CargoBuildError(f"building {name} ({crate}) needs {HINT}")
    target_dir = cache_root() / "cargo-target"
    target.parent.mkdir(parents=True, exist_ok=True)
    target_dir.mkdir(parents=True, exist_ok=True)
    # one build at a time in the shared target directory, up to the copy of its binary (cargo locks the
    # directory only while it builds: another checkout's build could replace the binary before the copy)
    with open(target_dir / ".peerlab-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(target, os.X_OK):  # built meanwhile by another process
            return target
        _build(crate, name, cargo, target_dir, target)
    return target


def test(crate: Path) -> subprocess.CompletedProcess:
    """`cargo test` of the crate's own unit tests, in the shared target directory (its dependencies are
    the release build's, so only the crate itself is compiled)."""
    cargo = _tool("cargo")
    if not cargo or not rustc_version():
        raise CargoBuildError(f"testing {crate} needs {HINT}")
    target_dir = cache_root() / "cargo-target"
    target_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir)}
    env["PATH"] = f"{Path(cargo).parent}{os.pathsep}{env.get('PATH', '')}"
    with open(target_dir / ".peerlab-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run([cargo, "test", "--release", "--locked"], cwd=crate, env=env, capture_output=True,
                              text=True)


def _build(crate: Path, name: str, cargo: str, target_dir: Path, target: Path) -> None:
    print(f"peerlab: building {name} from {crate} with {rustc_version()} (the first time on a machine takes "
          "minutes: crates are downloaded and compiled)", file=sys.stderr, flush=True)
    env = {**os.environ, "CARGO_TARGET_DIR": str(target_dir)}
    env["PATH"] = f"{Path(cargo).parent}{os.pathsep}{env.get('PATH', '')}"  # cargo runs rustc from there
    done = progress.run([cargo, "build", "--release", "--locked", "--bin", name], name, cwd=crate, env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    built = target_dir / "release" / name
    if done.returncode != 0 or not built.exists():
        raise CargoBuildError(f"building {name} ({crate}) failed; cargo said:\n{done.stderr.strip()[-3000:]}\n"
                              f"(it needs {HINT}, and crates.io for the first build)")
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.copy2(built, partial)
    os.replace(partial, target)
