"""The local cluster brought up ahead of tests/cluster, beside another command: `make test` runs the
emulation tests (which leave about half of the CPU idle: their runs' real time) while the cluster comes
up, so that the cluster tests start on it at once. Usage:

    python -m tests.cluster.ahead COMMAND...

Records what the host has (support.host_state) before bringing the cluster up, builds the orchestrator's
image and runs `peerlab cluster up --nodes 3` in a process of its own, runs COMMAND here, then waits
for the cluster. The exit status is COMMAND's, or the cluster's if only that failed. If either failed,
or on a signal, the cluster is taken down again and nothing of it is left for later steps. Once both
succeeded, `PEERLAB_TEST_CLUSTER_AHEAD=1 pytest -m cluster` (the conftest's `cluster` fixture) takes
the cluster as it is, compares the host after `down` with the state recorded here, and removes what
this left in DIR.
"""
from __future__ import annotations

import json
import os
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
BEFORE, LOG, STATUS = DIR / "host-before.json", DIR / "up.log", DIR / "up.status"
CLI = [sys.executable, "-m", "orchestrator.cli"]


def taken() -> set[str]:
    """For the fixture: the host's state before the cluster came up, once the up succeeded (else an
    assertion naming its last lines); removes DIR."""
    status = STATUS.read_text().split()[0] if STATUS.exists() else "never written"
    log = LOG.read_text()[-3000:] if LOG.exists() else ""
    before = set(json.loads(BEFORE.read_text())) if status == "0" else set()
    shutil.rmtree(DIR, ignore_errors=True)
    assert status == "0", f"the cluster brought up ahead did not come up (status {status}):\n{log}"
    return before


def _down() -> None:
    subprocess.run([*CLI, "cluster", "down"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(DIR, ignore_errors=True)


def main(command: list[str]) -> int:
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    shutil.rmtree(DIR, ignore_errors=True)
    DIR.mkdir()
    BEFORE.write_text(json.dumps(sorted(host_state())))
    script = (f"{' '.join(CLI)} image build --orchestrator && {' '.join(CLI)} cluster up --nodes {NODES}; "
              f"echo $? $SECONDS > {STATUS}")  # its exit status and how long it took
    with open(LOG, "w") as log:
        up = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ok = False
    try:
        code = subprocess.call(command)
        waited = time.monotonic()
        up.wait()
        cluster, took = (STATUS.read_text().split() + ["?"])[:2] if STATUS.exists() else ("none", "?")
        print(f"peerlab: the {NODES}-node cluster brought up beside it in {took} s (exit {cluster}), "
              f"{time.monotonic() - waited:.0f} s of it after the command's end; its log: {LOG}", file=sys.stderr)
        if cluster != "0":
            print(LOG.read_text()[-3000:], file=sys.stderr)
        ok = code == 0 and cluster == "0"
        return code or (0 if cluster == "0" else 1)
    finally:
        if not ok:
            if up.poll() is None:  # the up's whole session: bash and the CLI under it
                os.killpg(up.pid, signal.SIGTERM)
                up.wait()
            _down()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
