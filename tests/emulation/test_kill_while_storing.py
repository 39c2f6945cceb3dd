"""An orchestrator SIGKILLed while it stores the event logs (the first stored log has just begun to appear
in the store) loses no event: `peerlab clean` stores every node's log from the scratch copy where the
store holds none or a cut one, checks each, and only then removes the scratch directory; `peerlab
report` then reads every line the nodes wrote."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.emulation.test_local_backend import wait_for_line
from tests.support.cli import ROOT, peerlab, run_netns, short_id
from tests.support.scenarios import FLOODSUB_SIX, scenario_text

pytestmark = [pytest.mark.emulation, pytest.mark.slow, pytest.mark.exclusive]

# four nodes, every pair connected, 150 messages a second (as many as admission lets 2 cores take): logs of
# over a MB each, so gzipping the first takes long enough to be caught at it
SCENARIO = scenario_text("storing", 7, FLOODSUB_SIX.replace("count: 6", "count: 4"),
                         "workload: {publishers: 4, rate: 150/s, message_size: 128B, warmup: 1s, duration: 12s, drain: 1s}",
                         "calibration: {enabled: false}")


def nodes_running(run_dir: Path) -> list[str]:
    """The run's node namespaces that still hold a process."""
    return [ns for ns in sorted(run_netns(run_dir)) if not ns.endswith("-sw")
            and subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.strip()]


@pytest.mark.spark
def test_an_orchestrator_killed_while_storing_the_logs_loses_no_event_line(tmp_path: Path):
    scenario = tmp_path / "storing.yaml"
    scenario.write_text(SCENARIO + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--no-report"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "drain over: stopping nodes", 180)
        run_dir = next((tmp_path / "runs").iterdir())
        events = run_dir / "events"
        deadline = time.monotonic() + 60
        while not (events.is_dir() and os.listdir(events)):  # the first log is being stored: kill it there
            assert proc.poll() is None and time.monotonic() < deadline, "no log was stored"
            time.sleep(0.0005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    caught = sorted(os.listdir(events))
    print("in the store at the kill:", caught)
    # the nodes had all been told to stop: once they have exited, their scratch logs are whole
    deadline = time.monotonic() + 30
    while nodes_running(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    scratch = Path("/tmp/peerlab") / short_id(run_dir) / "events"
    written = {p.name.removesuffix(".jsonl"): p.read_bytes() for p in scratch.glob("*.jsonl")}
    assert sorted(written) == ["n0", "n1", "n2", "n3"] and min(d.count(b"\n") for d in written.values()) > 5000

    result = peerlab("clean")
    assert result.returncode == 0, result.stderr
    status = json.loads((run_dir / "status").read_text())
    assert status["status"] == "crashed", status
    assert sorted(os.listdir(events)) == [f"n{i}.jsonl.gz" for i in range(4)], caught  # no temporary left
    for node, data in written.items():  # every byte of every node's log, stored whole
        assert gzip.decompress((events / f"{node}.jsonl.gz").read_bytes()) == data, (node, caught)
    assert not scratch.parent.exists()  # removed once every log was stored and checked

    report = peerlab("report", str(run_dir), "--master", "local[2]", timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    metrics = json.loads((run_dir / "analysis" / "metrics.json").read_text())
    assert metrics["events"] == sum(d.count(b"\n") for d in written.values()), metrics
    assert not metrics.get("ingest"), metrics["ingest"]  # no line left out, no log missing
