"""Scenario data files (latency matrices, WonderProxy CSVs, churn traces): where a scenario may read
them, and how.

Scenarios arrive in pull requests and CI runs them as root, so a data path must not be a way to read
the machine's files. A relative path resolves against the scenario file's directory (the working
directory for a scenario given as text); the file it names, symlinks followed, must lie inside that
directory's tree or under a root the user allowed (`--data-root DIR`, or PEERLAB_DATA_ROOTS, a
colon-separated list); it must be a regular file (no device, FIFO, socket or directory) with one name (a hard link is
a second name of a file that may lie anywhere) of at most MAX_BYTES. Validation replaces each path by the file's real path; readers open that path again with
`read_bytes`, which checks the same (through orchestrator/model/bounded.py, the one reader of every
scenario and data file). Errors name the field and the path, never the file's contents.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import bounded

MAX_BYTES = 64 * 2**20
ENV_ROOTS = "PEERLAB_DATA_ROOTS"


@dataclass(frozen=True)
class DataAccess:
    base: Path               # relative paths start here
    roots: tuple[Path, ...]  # real paths a data file may be under (base first)

    @classmethod
    def for_scenario(cls, source: str | Path | None = None, roots: tuple[str | Path, ...] | list = ()) -> "DataAccess":
        """For the scenario file `source` (None or not a file: the working directory), with the allowed
        extra `roots` and those of PEERLAB_DATA_ROOTS."""
        base = Path(source).resolve().parent if source and Path(source).is_file() else Path.cwd().resolve()
        env = [p for p in os.environ.get(ENV_ROOTS, "").split(os.pathsep) if p]
        return cls(base, tuple(Path(r).resolve() for r in (base, *roots, *env)))

    def resolve(self, value: str) -> str:
        """The real path of the data file `value` names; ValueError saying why it may not be read."""
        path = Path(value) if os.path.isabs(value) else self.base / value
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            raise ValueError(f"no such file: {value}") from None
        if not any(real == root or root in real.parents for root in self.roots):
            raise ValueError(f"{value} is outside the scenario's directory ({self.base}) and the allowed data "
                             "roots: move the file there, or allow its directory with --data-root DIR")
        bounded.check_stat(os.stat(real), value, MAX_BYTES, _check)
        return str(real)


def _check(st: os.stat_result, shown: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{shown} is not a regular file (a directory, device, FIFO or socket)")
    if st.st_nlink > 1:  # another name of the same file may be anywhere on its file system
        raise ValueError(f"{shown} has {st.st_nlink} hard links: it may be a file from outside the allowed "
                         "directories under a second name; use a copy of it")
    if st.st_size > MAX_BYTES:
        raise ValueError(f"{shown} has {st.st_size / 2**20:.0f} MiB; a data file may have at most "
                         f"{MAX_BYTES // 2**20} MiB")


def resolve_field(value: str | None, info: Any) -> str | None:
    """A pydantic field validator: the path resolved and confined by the DataAccess in the
    validation context (`data`), else by one for the working directory."""
    if value is None:
        return None
    access = (info.context or {}).get("data") if info is not None else None
    return (access or DataAccess.for_scenario()).resolve(value)


def read_bytes(path: str) -> bytes:
    """A file `DataAccess.resolve` returned, read without following a symlink put there since and
    with the same checks on what was opened."""
    return bounded.read_regular(path, MAX_BYTES, follow=False, check=_check)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8", errors="replace")


# where no run is written, however the store is named (scenarios run as root in CI)
SYSTEM_DIRS = tuple(Path(p) for p in ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot",
                                      "/dev", "/proc", "/sys", "/run", "/var/lib", "/var/spool", "/var/log",
                                      "/var/cache", "/root/.ssh", "/root/.config"))


def check_output_dir(value: str) -> None:
    """ValueError when the directory `value` (symlinks followed as far as they exist) is the root
    directory or under a system directory."""
    real = Path(os.path.realpath(value))
    bad = real == Path("/") or next((d for d in SYSTEM_DIRS if real == d or d in real.parents), None)
    if bad:
        raise ValueError(f"{value} is {'the root directory' if bad is True else f'in the system directory {bad}'}: "
                         "keep runs elsewhere (the default file://./runs, a home directory, /srv, /data, /tmp)")
