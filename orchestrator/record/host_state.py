"""The runs this host has, by their state files and leases: which, whose, alive or not, and where their
scratch is.

Every run registers itself: it takes its lease (`<state dir>/<short>.lease`, an flock its orchestrator
holds for the run's life: lease.py), then writes its state file (`<state dir>/<short>.json`, whole or
not at all). The state directory of root's runs is always /run/peerlab, so every `peerlab clean` on
the machine sees every run that made namespaces or containers. Kernel objects are all named
`pl<short>-...`, so a run whose state file is gone is still found by its namespaces, and judged by its
lease. Teardown and `peerlab clean` use the same functions (the namespaces themselves are removed by
the local backend: orchestrator/backends/local.py), so a run killed with SIGKILL is cleaned exactly as
a finished one.
"""
from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import netns

from orchestrator.record import lease as leases
from orchestrator.store.durable import private_dir, write_atomic

ROOT_STATE_DIR = Path("/run/peerlab")


def default_state_dir() -> Path:
    """/run/peerlab for root, always (the backends that make namespaces and containers need root, and
    `peerlab clean` must see all of their runs: one in another state directory would be an orphan to
    it); otherwise $PEERLAB_STATE_DIR, else the user's own runtime directory, since the kubernetes and
    sim backends need no root."""
    if os.geteuid() == 0:
        return ROOT_STATE_DIR
    if os.environ.get("PEERLAB_STATE_DIR"):
        return Path(os.environ["PEERLAB_STATE_DIR"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "peerlab" if runtime else Path.home() / ".local" / "state" / "peerlab"


STATE_DIR = default_state_dir()


def scratch_root() -> Path:
    """Where runs keep their scratch directories (`<tmp>/peerlab/<short>`). The folder is shared by
    every user, so it is made sticky and world-writable like /tmp itself: a run as root must not lock
    other users out (a folder made 0755 by root before is opened up by the next root run). Where it
    is not writable all the same, the user gets `<tmp>/peerlab-<uid>` of their own."""
    root = Path(tempfile.gettempdir()) / "peerlab"
    root.mkdir(exist_ok=True)
    st = root.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o7777 != 0o1777:
        root.chmod(0o1777)  # mkdir's mode would pass through the umask
    if not os.access(root, os.W_OK | os.X_OK):
        root = Path(tempfile.gettempdir()) / f"peerlab-{os.geteuid()}"
        root.mkdir(mode=0o700, exist_ok=True)
    return root


_NAME = re.compile(r"^pl([0-9a-f]{6})-")


@dataclass
class RunState:
    short: str
    run_id: str
    pid: int
    run_dir: str
    scratch: str

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.short}.json"


def lease_path(short: str) -> Path:
    return STATE_DIR / f"{short}.lease"


def record_run(state: RunState) -> None:
    """Register a run: its lease first (held by this process until `forget_run`), then its state file."""
    private_dir(STATE_DIR)  # the runs' pids and paths: no node (the run's unprivileged user) reads them
    leases.take(lease_path(state.short), state.run_id)
    write_atomic(state.path, json.dumps(state.__dict__), mode=0o600)


def forget_run(short: str) -> None:
    """Unregister a run: its state file, then its lease (this process's, or the one `clean` claimed)."""
    (STATE_DIR / f"{short}.json").unlink(missing_ok=True)
    leases.give_back(lease_path(short))


def holder() -> str:
    """Who runs this orchestrator, as its leases and the labels of what it creates say: `host/pid`."""
    return f"{socket.gethostname()}/{os.getpid()}"


def holder_here(owner: str) -> bool | None:
    """Is the orchestrator `owner` (`host/pid`) alive? True or False when it ran on this host; None when
    it ran on another one (or the label is not one of ours), where nothing here can tell."""
    host, _, pid = owner.rpartition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return _pid_alive(int(pid))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class FoundRun:
    """A run `peerlab clean` found: by its state file (None if it has none, or an unreadable one), its
    lease, or its namespaces."""

    short: str
    state: RunState | None
    lease: leases.Lease
    unreadable: bool = False  # its state file could not be read

    @property
    def name(self) -> str:
        return self.state.run_id if self.state else self.lease.run_id or self.short


def find_runs() -> list[FoundRun]:
    """Every run with a state file, a lease or namespaces on this host. A free lease is claimed (held
    by this process until `forget_run`), so the run cannot be taken up again while it is cleaned."""
    states: dict[str, RunState | None] = {}
    shorts: set[str] = set()
    if STATE_DIR.is_dir():
        for path in STATE_DIR.glob("*.json"):
            shorts.add(path.stem)
            try:
                data = json.loads(path.read_text())
                states[path.stem] = RunState(**data)
            except (ValueError, KeyError, TypeError):
                states[path.stem] = None  # kept: removed only with its lease free
        shorts |= {path.stem for path in STATE_DIR.glob("*.lease")}
    for name in netns.listnetns():
        m = _NAME.match(name)
        if m:
            shorts.add(m.group(1))
    found = []
    for short in sorted(shorts):
        held = leases.check(lease_path(short), claim=True)
        found.append(FoundRun(short, states.get(short), held, short in states and states[short] is None))
    return found


def remove_state_file(short: str) -> None:
    """An unreadable state file whose run is dead (its lease free)."""
    (STATE_DIR / f"{short}.json").unlink(missing_ok=True)


def mark_status(run_dir: str, status: str, detail: str = "") -> None:
    """The run's `status` file, replaced whole."""
    if Path(run_dir).is_dir():
        write_atomic(Path(run_dir) / "status", json.dumps({"status": status, "detail": detail, "time": time.time()}) + "\n")
