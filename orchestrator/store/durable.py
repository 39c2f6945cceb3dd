"""Crash-safe files: what peerlab stores (event logs, the manifest, `status`, state files, secrets) is
written under a temporary name beside its final one (`.<name>.<random>.tmp`), fsynced, and renamed into
place, and the folder fsynced: a process killed at any point leaves the old file or the complete new
one at the final name, never a cut one (a leftover temporary is removed by `peerlab clean`). And the
check that tells a stored log from a cut one: `covers` reads a gzip to its end (its CRC and length)
and compares it with the log it was made from.

Secrets (a node's config holds the run's control token) are written the same way with mode 0o600
from their creation, and `private_dir` makes the folders that hold them 0o700.

A full disk is not a crash: a log whose gzip fills the disk is renamed into place as far as it got
(the analysis reads it up to the cut, and the run's status names the scratch copy that is whole).
"""
from __future__ import annotations

import errno
import gzip
import os
import secrets
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # what a write into a full store fails with
TEMP = ".tmp"
CHUNK = 1 << 20


def temp_for(dest: Path) -> Path:
    """A fresh temporary name beside `dest`, hidden and ending in .tmp (never read as a stored file)."""
    return dest.with_name(f".{dest.name}.{secrets.token_hex(4)}{TEMP}")


def fsync_dir(folder: Path) -> None:
    """Make the names in `folder` (a rename into it) durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_temp(dest: Path, mode: int) -> tuple[Path, int]:
    tmp = temp_for(dest)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    if mode & 0o077 == 0:
        os.fchmod(fd, mode)  # private from its first byte, whatever the umask
    return tmp, fd


def write_atomic(dest: Path, data: bytes | str, *, mode: int = 0o666, owner: int | None = None,
                 sync_dir: bool = True) -> None:
    """Write `data` to `dest` whole or not at all. `mode` 0o600 makes a file no one else can read from
    its creation (for secrets); otherwise it is 0o666 less the umask, as any new file. `owner`: the
    uid (and gid) it is given before it appears, for a reader that runs as another user."""
    raw = data.encode() if isinstance(data, str) else data
    with _replacing(dest, mode, owner, sync_dir) as (f, _):
        f.write(raw)


def write_private(dest: Path, data: bytes | str, owner: int | None = None) -> None:
    """A secret (a token, a key, a config that holds one): 0o600 from its creation, replaced whole."""
    write_atomic(dest, data, mode=0o600, owner=owner)


def private_dir(path: Path, owner: int | None = None) -> Path:
    """`path` as a folder only its owner (this user, or `owner`) can enter: made 0o700, never wider for a
    moment (an existing one is narrowed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    os.chmod(path, 0o700)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def gzip_atomic(src: Path, dest: Path, *, level: int = 5, sync_dir: bool = True) -> None:
    """Store `src` gzipped at `dest`: complete, or (on a full disk) cut where the disk filled."""
    with _replacing(dest, 0o666, None, sync_dir) as (raw, tmp):
        try:
            with open(src, "rb") as fin, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level,
                                                       filename="", mtime=0) as fout:
                for block in iter(lambda: fin.read(CHUNK), b""):
                    fout.write(block)
        except OSError as err:
            if err.errno in DISK_FULL:  # what fitted is kept, read up to the cut
                _flush_quietly(raw)
                os.replace(tmp, dest)
            raise


@contextmanager
def _replacing(dest: Path, mode: int, owner: int | None, sync_dir: bool) -> Iterator[tuple[BinaryIO, Path]]:
    """(the file, its temporary name) beside `dest`; when the block ends the file is fsynced and renamed
    onto `dest` (and the folder fsynced); if the block raises, the temporary is removed."""
    tmp, fd = _open_temp(dest, mode)
    try:
        if owner is not None:
            os.fchown(fd, owner, owner)
        with os.fdopen(fd, "wb") as f:
            yield f, tmp
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(dest.parent)


def _flush_quietly(raw) -> None:
    try:
        raw.flush()
    except OSError:
        pass


def covers(stored: Path, source: Path) -> bool:
    """Does the gzip `stored` hold all of `source` (a node's log, which only grows)? True when it is a
    whole gzip stream (read to its end: its CRC and length check) whose content starts with `source`'s;
    False when it is cut short, damaged, or holds less or other bytes."""
    try:
        with gzip.open(stored, "rb") as z, open(source, "rb") as f:
            for block in iter(lambda: f.read(CHUNK), b""):
                if z.read(len(block)) != block:
                    return False
            while z.read(CHUNK):  # to the end of the stream: gzip checks the CRC and length there
                pass
        return True
    except (OSError, EOFError, zlib.error):  # BadGzipFile is an OSError
        return False


def remove_temps(folder: Path) -> int:
    """Remove the temporaries a killed writer left in `folder`; how many."""
    found = list(folder.glob(f".*{TEMP}")) if folder.is_dir() else []
    for path in found:
        path.unlink(missing_ok=True)
    return len(found)
