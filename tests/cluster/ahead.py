"""The local cluster brought up ahead of tests/cluster, beside another command: `make test` runs the
emulation tests (which leave about half of the CPU idle: their runs' real time) while the cluster comes
up, so that the cluster tests start on it at once. Usage:

    python -m tests.cluster.ahead COMMAND...    the cluster up beside COMMAND
    python -m tests.cluster.ahead --down        after a failed cluster step: the cluster down, DIR removed

Records what the host has (support.host_state) before bringing the cluster up, builds the orchestrator's
image and runs `peerlab cluster up --nodes 3` in a process of its own, runs COMMAND here, then waits
for the cluster. The exit status is COMMAND's (128 + N if a signal N ended it), or 1 if only the cluster
failed. If either failed (a failed COMMAND at once, without waiting for the up), or on SIGINT or
SIGTERM (passed on to COMMAND, which ends as it would alone), the cluster is taken down again and
nothing of it is left for later steps. Once both succeeded, `PEERLAB_TEST_CLUSTER_AHEAD=1 pytest -m
cluster` (the conftest's `cluster` fixture) takes the cluster as it is, compares the host after `down`
with the state recorded here, and removes DIR (root's, beside the cluster's own state: no other user
can put anything there).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.cluster.layout import Layout
from tests.cluster.support import NODES, host_state
from tests.support.cli import ROOT, patient

ENV = "PEERLAB_TEST_CLUSTER_AHEAD"
DIR = Layout.default().root.parent / "cluster-ahead"
CLI = [sys.executable, "-m", "orchestrator.cli"]
UP_S = 2700  # the orchestrator's image and the up, the most they may take (as the fixture's own: 900 + 1800)


def _files(where: Path) -> tuple[Path, Path, Path]:
    """The host's state before the up, the up's output, and its exit status and seconds."""
    return where / "host-before.json", where / "up.log", where / "up.status"


def taken(where: Path = DIR) -> set[str]:
    """For the fixture: the host's state before the cluster came up, once the up succeeded (else an
    assertion naming its last lines); removes `where`."""
    before, log, status = _files(where)
    code = status.read_text().split()[0] if status.exists() else "never written"
    said = log.read_text()[-3000:] if log.exists() else ""
    found = set(json.loads(before.read_text())) if code == "0" else set()
    shutil.rmtree(where, ignore_errors=True)
    assert code == "0", f"the cluster brought up ahead did not come up (status {code}):\n{said}"
    return found


def down(where: Path = DIR) -> bool:
    """The cluster down (whatever state its up reached) and `where` removed; False, saying why, if the
    down failed."""
    done = subprocess.run([*CLI, "cluster", "down"], cwd=ROOT, capture_output=True, text=True)
    shutil.rmtree(where, ignore_errors=True)
    if done.returncode != 0:
        print(f"peerlab: `cluster down` failed (exit {done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
    return done.returncode == 0


def _namespaces_in_use() -> None:
    """A network namespace made and removed, as the emulation tests' first run does: the first one on a
    machine mounts /run/netns (pyroute2, as `ip netns`), which stays; recorded before, it is not taken
    for what the cluster left."""
    from pyroute2 import netns
    name = f"ahead{os.getpid()}"
    netns.create(name)
    netns.remove(name)


def _ended(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N: as a shell says it


def main(command: list[str], where: Path = DIR) -> int:
    if command == ["--down"]:
        return 0 if down(where) else 1
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    before, log, status = _files(where)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (before the up starts: it is taken down)
    up: subprocess.Popen | None = None
    child: subprocess.Popen | None = None
    ok = False
    try:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True, mode=0o700)
        _namespaces_in_use()
        before.write_text(json.dumps(sorted(host_state())))
        script = (f"{shlex.join([*CLI, 'image', 'build', '--orchestrator'])} && "
                  f"{shlex.join([*CLI, 'cluster', 'up', '--nodes', str(NODES)])}; "
                  f"echo $? $SECONDS > {shlex.quote(str(status))}")  # its exit status and how long it took
        with open(log, "w") as out:
            up = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        child = subprocess.Popen(command)
        code = _ended(child.wait())
        if code != 0:  # no cluster tests follow: the up stopped where it is and taken down
            print(f"peerlab: the command failed (exit {code}): the cluster coming up beside it is taken down",
                  file=sys.stderr)
            return code
        waited = time.monotonic()
        try:
            up.wait(timeout=patient(UP_S))
        except subprocess.TimeoutExpired:
            print(f"peerlab: the cluster not up after {patient(UP_S):.0f} s", file=sys.stderr)
        cluster, took = (status.read_text().split() + ["?"])[:2] if status.exists() else ("none", "?")
        print(f"peerlab: `cluster up --nodes {NODES}` beside it: exit {cluster} after {took} s, "
              f"{time.monotonic() - waited:.0f} s of it after the command's end; its log: {log}", file=sys.stderr)
        if cluster != "0":
            print(log.read_text()[-3000:], file=sys.stderr)
        ok = cluster == "0"
        return 0 if ok else 1
    except BaseException as err:  # SIGINT (the command has it from the terminal too) or SIGTERM (passed on)
        if child is not None and child.poll() is None:
            if not isinstance(err, KeyboardInterrupt):
                child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=patient(60))
            except subprocess.TimeoutExpired:
                child.kill()
        raise
    finally:
        if not ok:
            if up is not None and up.poll() is None:  # the up's whole session: bash and the CLI under it
                os.killpg(up.pid, signal.SIGTERM)
                up.wait()
            down(where)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
