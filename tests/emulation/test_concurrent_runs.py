"""Two runs at once on one machine (issue #27): each gets its own namespaces, addresses and shaping,
both complete with every message delivered to every subscriber while the other's nodes are up
(their nodes' lifetimes overlap by 3 s or more), and neither leaves anything."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT, run_netns
from tests.support.scenarios import FLOODSUB_SIX, scenario_text

pytestmark = [pytest.mark.emulation, pytest.mark.slow]

RUN = """\
workload: {publishers: 2, rate: 4/s, warmup: 1s, duration: 8s, drain: 2s, message_size: 512B}
calibration: {pairs: 2, throughput_nodes: 2, throughput_rounds: 1}
"""


def test_two_runs_at_once_both_deliver_everything_and_leave_nothing(tmp_path: Path):
    procs = []
    for i in (1, 2):
        path = tmp_path / f"twin{i}.yaml"
        path.write_text(scenario_text(f"twin-{i}", i, FLOODSUB_SIX, RUN, f"output: {{store: 'file://{tmp_path}/runs{i}'}}"))
        procs.append(subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(path), "--no-report"],
                                      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
    run_dirs = [Path(out.strip().splitlines()[-1]) for out, _ in results]
    assert run_dirs[0].name != run_dirs[1].name
    lives = []  # each run's nodes from the first start to the last stop: the runs must have overlapped
    for run_dir in run_dirs:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "completed"
        logs = {}
        for node in manifest["plan"]["nodes"]:
            with gzip.open(run_dir / "events" / f"{node['id']}.jsonl.gz", "rt") as f:
                logs[node["id"]] = [json.loads(line) for line in f]
        times = [e["ts"] for evs in logs.values() for e in evs if e["type"] in ("start", "stop")]
        lives.append((min(times) / 1e9, max(times) / 1e9))
        published = {e["msg_id"]: e["node"] for evs in logs.values() for e in evs if e["type"] == "publish_message"}
        assert len(published) >= 12
        for node, events in logs.items():
            got = {e["msg_id"] for e in events if e["type"] == "deliver_message"}
            assert {m for m, by in published.items() if by != node} <= got, (run_dir.name, node)
        assert run_netns(run_dir) == set()
    overlap = min(end for _, end in lives) - max(start for start, _ in lives)
    assert overlap >= 3, f"the two runs' nodes were up together for {overlap:.1f} s only: {lives}"
