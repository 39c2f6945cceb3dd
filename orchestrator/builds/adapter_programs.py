"""The compiled node adapters' programs: go-libp2p's (our Go code, built by orchestrator/builds/gobuild.py) and
rust-libp2p's (our Rust crate, built by orchestrator/builds/cargobuild.py), each from its pinned sources in
node/adapters/<name>/ into the user's cache, once per change of its sources or toolchain, then installed
at .tools/<name>/<program> as a real file (a hard link to the cached binary, or a copy): the adapter's
adapter.json command runs it there, and its Docker image copies it from there (a build context follows
no symlink out of the checkout). `peerlab image build` installs it first, so an image never holds a
binary older than its sources.

    python -m orchestrator.builds.adapter_programs [NAME ...]   (.ci/adapters: every one) a line each
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from node.paths import ROOT
from orchestrator.builds import cargobuild, gobuild

ADAPTERS = ROOT / "node" / "adapters"
TOOLS = ROOT / ".tools"


@dataclass(frozen=True)
class Program:
    name: str                          # the executable, as adapter.json's command names it
    build: Callable[[Path, str], Path]  # (sources, name) -> the binary in the cache, built if needed
    toolchain: Callable[[], str]


def _go(source: Path, name: str) -> Path:
    # static (no cgo: it runs in any image), without symbols and DWARF (a third smaller, the same program)
    return gobuild.binary(source, ".", name, ldflags="-s -w", own=True, static=True)


def _cargo(source: Path, name: str) -> Path:
    return cargobuild.binary(source, name)


PROGRAMS = {
    "go-libp2p": Program("go-libp2p-node", _go, gobuild.go_version),
    "rust-libp2p": Program("rust-libp2p-node", _cargo, cargobuild.rustc_version),
}
ERRORS = (gobuild.GoBuildError, cargobuild.CargoBuildError)


def installed(adapter: str) -> Path:
    return TOOLS / adapter / PROGRAMS[adapter].name


def install(adapter: str) -> tuple[Path, bool]:
    """The adapter's program built (if its sources changed) and at .tools/<adapter>/<program>: its path
    there, and whether that file had to change."""
    program = PROGRAMS[adapter]
    built = program.build(ADAPTERS / adapter, program.name)
    dest = installed(adapter)
    try:
        if dest.exists() and os.path.samefile(built, dest):
            return dest, False
    except OSError:
        pass
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}")
    partial.unlink(missing_ok=True)
    try:
        os.link(built, partial)
    except OSError:  # the cache on another file system
        shutil.copy2(built, partial)
    os.replace(partial, dest)
    return dest, True


def main(argv: list[str]) -> int:
    names = argv or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        print(f"peerlab: {unknown[0]} has no compiled program; these do: {', '.join(PROGRAMS)}", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        try:
            path, changed = install(name)
        except ERRORS as err:
            print(f"peerlab: the {name} adapter was not built: {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"peerlab: {name} adapter ({PROGRAMS[name].toolchain()}) at {path.relative_to(ROOT)}, "
              f"{path.stat().st_size / 2**20:.0f} MB, {'installed' if changed else 'up to date'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
