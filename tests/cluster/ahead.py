"""The local cluster brought up ahead of tests/cluster, beside another command: `make test` runs the
emulation tests (which leave about half of the CPU idle: their runs' real time) while the cluster comes
up, so that the cluster tests start on it at once. Usage:

    python -m tests.cluster.ahead COMMAND...

Records what the host has (support.host_state) before bringing the cluster up, builds the orchestrator's
image and runs `peerlab cluster up --nodes 3` in a process of its own, runs COMMAND here, then waits
for the cluster. The exit status is COMMAND's, or the cluster's if only that failed. If either failed
(a failed COMMAND at once, without waiting for the up), or on a signal, the cluster is taken down again
and nothing of it is left for later steps. Once both succeeded, `PEERLAB_TEST_CLUSTER_AHEAD=1 pytest
-m cluster` (the conftest's `cluster` fixture) takes the cluster as it is, compares the host after
`down` with the state recorded here, and removes what this left in DIR.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.cluster.support import NODES, host_state
from tests.support.cli import ROOT

ENV = "PEERLAB_TEST_CLUSTER_AHEAD"
DIR = Path(tempfile.gettempdir()) / "peerlab-cluster-ahead"
CLI = [sys.executable, "-m", "orchestrator.cli"]


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


def _down(where: Path) -> None:
    subprocess.run([*CLI, "cluster", "down"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(where, ignore_errors=True)


def main(command: list[str], where: Path = DIR) -> int:
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    before, log, status = _files(where)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    before.write_text(json.dumps(sorted(host_state())))
    script = (f"{shlex.join([*CLI, 'image', 'build', '--orchestrator'])} && "
              f"{shlex.join([*CLI, 'cluster', 'up', '--nodes', str(NODES)])}; "
              f"echo $? $SECONDS > {shlex.quote(str(status))}")  # its exit status and how long it took
    with open(log, "w") as out:
        up = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                              start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ok = False
    try:
        code = subprocess.call(command)
        if code != 0:  # no cluster tests follow: the up stopped where it is and taken down
            print(f"peerlab: the command failed (exit {code}): the cluster coming up beside it is taken down",
                  file=sys.stderr)
            return code
        waited = time.monotonic()
        up.wait()
        cluster, took = (status.read_text().split() + ["?"])[:2] if status.exists() else ("none", "?")
        print(f"peerlab: `cluster up --nodes {NODES}` beside it: exit {cluster} after {took} s, "
              f"{time.monotonic() - waited:.0f} s of it after the command's end; its log: {log}", file=sys.stderr)
        if cluster != "0":
            print(log.read_text()[-3000:], file=sys.stderr)
        ok = code == 0 and cluster == "0"
        return code or (0 if cluster == "0" else 1)
    finally:
        if not ok:
            if up.poll() is None:  # the up's whole session: bash and the CLI under it
                os.killpg(up.pid, signal.SIGTERM)
                up.wait()
            _down(where)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
