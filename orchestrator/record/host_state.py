"""The runs this host has, by their state files: which, whose, and where their scratch is.

Every run registers itself in a state file (`<state dir>/<short>.json`: /run/peerlab as root) holding
the orchestrator's pid; kernel objects are all named `pl<short>-...`, so a run whose state file is
gone is still found by its namespaces. Teardown and `peerlab clean` use the same functions (the
namespaces themselves are removed by the local backend: orchestrator/backends/local.py), so a run
killed with SIGKILL is cleaned exactly as a finished one.
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


def default_state_dir() -> Path:
    """$PEERLAB_STATE_DIR, else /run/peerlab for root (the backends that make namespaces need root);
    otherwise the user's own runtime directory, since the kubernetes and sim backends need no root."""
    if os.environ.get("PEERLAB_STATE_DIR"):
        return Path(os.environ["PEERLAB_STATE_DIR"])
    if os.geteuid() == 0:
        return Path("/run/peerlab")
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


def record_run(state: RunState) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state.path.write_text(json.dumps(state.__dict__))


def forget_run(short: str) -> None:
    (STATE_DIR / f"{short}.json").unlink(missing_ok=True)


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


def salvage_logs(run_dir: str, sources: list[Path]) -> int:
    """A crashed run's event logs, gzipped from where its nodes wrote them (`sources`: folders of
    <node>.jsonl) into its run directory, before `peerlab clean` removes those folders; logs the run
    already stored are left as they are. Returns how many were salvaged. A full disk stops it."""
    from orchestrator.store import DISK_FULL, FileStore

    root = Path(run_dir)
    if not root.is_dir():
        return 0
    store, count = FileStore(root.parent), 0
    for folder in sources:
        for log in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            if (root / "events" / f"{log.stem}.jsonl.gz").exists():
                continue
            try:
                store.put_log(root.name, log.stem, log)
            except OSError as err:
                if err.errno in DISK_FULL:
                    return count
                raise
            count += 1
    return count


def find_runs() -> list[tuple[RunState | None, str, bool]]:
    """(state or None, short id, orchestrator alive) for every run with a state file or namespaces."""
    seen: dict[str, RunState | None] = {}
    if STATE_DIR.is_dir():
        for path in STATE_DIR.glob("*.json"):
            try:
                data = json.loads(path.read_text())
                seen[data["short"]] = RunState(**data)
            except (ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
    for name in netns.listnetns():
        m = _NAME.match(name)
        if m and m.group(1) not in seen:
            seen[m.group(1)] = None  # namespaces with no state file: an orphan
    return [(st, short, bool(st and _pid_alive(st.pid))) for short, st in sorted(seen.items())]


def mark_status(run_dir: str, status: str, detail: str = "") -> None:
    path = Path(run_dir) / "status"
    if Path(run_dir).is_dir():
        path.write_text(json.dumps({"status": status, "detail": detail, "time": time.time()}) + "\n")
