"""The local cluster's processes: started detached (they outlive `peerlab cluster up`), one log file
and one pid file each in the state directory, waited for until they answer, stopped by pid file.
"""
from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from orchestrator.cluster.components import Component
from orchestrator.cluster.layout import Layout


class DaemonError(RuntimeError):
    """A component did not start; the message names it, says why and ends with its log's tail."""


def pid_of(s: Layout, name: str) -> int | None:
    """The pid of a running component (its pid file names a live process of the same program), else None."""
    try:
        pid = int((s.run / f"{name}.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError):
        return None
    expected = (s.run / f"{name}.cmd").read_text() if (s.run / f"{name}.cmd").exists() else ""
    return pid if cmdline and cmdline == expected else None


def log_tail(s: Layout, name: str, lines: int = 15) -> str:
    try:
        return "\n".join((s.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(s: Layout, c: Component, pki: Path | None = None, timeout: float = 60) -> int:
    """Start the component unless it runs; wait until it answers (Component.ready); its pid."""
    running = pid_of(s, c.name)
    if running:
        return running
    for path, text in c.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with open(s.logs / f"{c.name}.log", "ab") as log:
        proc = subprocess.Popen(c.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    (s.run / f"{c.name}.pid").write_text(str(proc.pid))
    (s.run / f"{c.name}.cmd").write_text(c.argv[0])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonError(f"{c.name} exited (code {proc.returncode}) while starting; "
                              f"its log ({s.logs / (c.name + '.log')}) ends:\n{log_tail(s, c.name)}")
        if answers(c.ready, s):
            return proc.pid
        time.sleep(0.3)
    raise DaemonError(f"{c.name} did not answer ({c.ready}) within {timeout:.0f} s; "
                      f"its log ({s.logs / (c.name + '.log')}) ends:\n{log_tail(s, c.name)}")


def answers(ready: str, s: Layout) -> bool:
    kind, _, where = ready.partition(":")
    try:
        if kind == "":
            return True
        if kind == "tcp":
            with socket.create_connection(("127.0.0.1", int(where)), timeout=1):
                return True
        if kind == "udp":  # bound: a second bind to the same address fails
            host, port = where.rsplit(":", 1)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                try:
                    probe.bind((host, int(port)))
                except OSError:
                    return True
                return False
        if kind == "unix":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(1)
                sock.connect(where)
                return True
        if kind == "https":
            ctx = ssl.create_default_context(cafile=str(s.pki / "ca.crt"))
            ctx.load_cert_chain(s.pki / "admin-client.crt", s.pki / "admin.key")
            with urllib.request.urlopen(ready, context=ctx, timeout=2) as answer:
                return answer.status == 200
    except (OSError, ValueError):
        return False
    return False


def _alive(pid: int) -> bool:
    """Running (a zombie, ended but not yet reaped by the process that started it, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop(s: Layout, name: str, grace: float = 10) -> bool:
    """SIGTERM, then SIGKILL after `grace` seconds; True if it was running."""
    pid = pid_of(s, name)
    if pid is None:
        (s.run / f"{name}.pid").unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    (s.run / f"{name}.pid").unlink(missing_ok=True)
    return True
