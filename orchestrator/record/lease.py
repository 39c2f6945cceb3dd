"""A run's lease on this host: `<state dir>/<short>.lease`, a file its orchestrator holds an exclusive
flock on for the run's whole life. The kernel drops the lock when the process dies, however it dies,
so `peerlab clean` tells a live run from a dead one by trying the lock (without waiting): held is
alive, free is dead (the kernel lets go a few milliseconds after the process is gone: a `clean` in that
instant leaves the run for the next). The file also says who took it (pid, the process's start time, run id): the
reading used where the lock cannot be tried, as a pid alone could be a later process's.

The lease appears under its name already locked (taken under a temporary name, then renamed), so no
one ever finds it free while its run lives; it goes before the run's state file is removed. Its
descriptor is closed in every child this process forks (pyroute2 forks to enter a namespace): a child
that outlived the orchestrator would otherwise keep the lock, and the dead run would look alive.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.store.durable import temp_for

HELD: dict[Path, int] = {}  # lease path -> the descriptor this process holds its lock through


def _close_in_child() -> None:
    for fd in HELD.values():
        try:
            os.close(fd)  # not LOCK_UN: that would drop the parent's lock too
        except OSError:
            pass
    HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat), None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def take(path: Path, run_id: str) -> None:
    """Take the lease at `path` for this process until `give_back` (or its death)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_for(path)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"pid": os.getpid(), "started": start_time(os.getpid()), "run_id": run_id}).encode())
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    HELD[path] = fd


def give_back(path: Path) -> None:
    """Remove the lease file (if it is still the one this process holds) and drop the lock."""
    fd = HELD.pop(path, None)
    if fd is None:
        return
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            path.unlink()
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def let_go(path: Path) -> None:
    """Drop the lock this process holds on `path`, leaving the file (a run `clean` could not finish:
    the next `clean` finds it free and tries again)."""
    fd = HELD.pop(path, None)
    if fd is not None:
        os.close(fd)


@dataclass
class Lease:
    """What a lease file says. `state`: held (its orchestrator lives), free (it died), none (no file)."""

    state: str
    pid: int | None = None
    run_id: str = ""
    how: str = ""  # how the state was told: "lock", or "pid and start time" where the lock could not be tried

    def describe(self) -> str:
        who = f"orchestrator pid {self.pid}" if self.pid else "its orchestrator"
        return {"held": f"{who} holds its lease", "free": f"{who} died (its lease is free)",
                "none": "no lease"}[self.state] + (f", by {self.how}" if self.how and self.how != "lock" else "")


def check(path: Path, claim: bool = False) -> Lease:
    """Is the lease at `path` held? With `claim`, a free lease is kept locked by this process (until
    `give_back`), so no run and no other clean can take it while this one cleans."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return Lease("none")
    except OSError:
        return _by_pid(path)
    try:
        info = _read(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return Lease("held", info.get("pid"), info.get("run_id", ""), "lock")
            return _by_pid(path)  # a file system without flock
        if claim:
            HELD[path], fd = fd, -1
        return Lease("free", info.get("pid"), info.get("run_id", ""), "lock")
    finally:
        if fd >= 0:
            os.close(fd)


def _read(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}


def _by_pid(path: Path) -> Lease:
    """The fallback reading: alive if the recorded pid runs and started when the lease says."""
    try:
        info = json.loads(path.read_text())
        pid, started = int(info["pid"]), info.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        return Lease("none")
    alive = started is not None and start_time(pid) == started
    return Lease("held" if alive else "free", pid, info.get("run_id", ""), "pid and start time")
