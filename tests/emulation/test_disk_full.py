"""A run whose runs directory fills up while its event logs are stored: it ends `failed` with "disk
full" in its status, keeps every byte it stored (the log being written when the disk filled is cut
short, and read up to the cut), keeps every node's complete log in its scratch directory and says
where, and `peerlab report` of it (once there is room) reports what is there, as a partial run."""
from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from analysis.job import analyse
from tests.support.cli import peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.spark, pytest.mark.slow]

SCENARIO = """name: disk-full
seed: 5
nodes: {count: 8}
protocol: gossipsub
network: {latency: {model: constant, one_way: 10ms}}
topics: {count: 1}
workload: {publishers: 8, rate: 40/s, message_size: 512B, warmup: 2s, duration: 10s, drain: 2s}
calibration: {enabled: false}
"""
TMPFS_KIB = 640


@pytest.fixture
def small_runs_dir(tmp_path: Path):
    mnt = tmp_path / "runs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_KIB}k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def readable_lines(path: Path) -> list[dict]:
    """The JSON lines a gzip file holds up to where it ends, cut short or not."""
    data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(path.read_bytes())
    lines = data.decode(errors="replace").split("\n")
    complete = lines if data.endswith(b"\n") else lines[:-1]
    return [json.loads(line) for line in complete if line]


def test_disk_full_while_collecting_keeps_every_byte_and_says_so(small_runs_dir: Path, tmp_path: Path, spark):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO + f"output: {{store: 'file://{small_runs_dir}'}}\n")
    result = peerlab("run", str(scenario), "--no-report")
    assert result.returncode == 1, result.stderr
    assert "disk full while storing the event log of" in result.stderr
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    status = json.loads((run_dir / "status").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert status["status"] == manifest["status"] == "failed"
    assert "disk full" in status["detail"] and status["detail"] == manifest["detail"]
    assert not (run_dir / ".reserve").exists()

    scratch = Path(status["detail"].rsplit("kept in ", 1)[1])
    try:
        stored = sorted((run_dir / "events").glob("*.jsonl.gz"))
        assert 1 <= len(stored) < 8 and manifest["logs_collected"] == len(stored)
        complete = {p.name.split(".")[0]: p for p in (scratch / "events").glob("*.jsonl")}
        assert len(complete) == 8
        for path in stored:  # every stored byte reads back, and is the start of the node's complete log
            node = path.name.split(".")[0]
            lines = readable_lines(path)
            with open(complete[node]) as f:
                full = [json.loads(line) for line in f]
            assert lines == full[:len(lines)]  # (the cut one may hold no whole line yet)
        cut = [p for p in stored if len(readable_lines(p)) < sum(1 for _ in open(complete[p.name.split(".")[0]]))]
        assert len(cut) <= 1 and [p for p in stored if p not in cut] == stored[:len(stored) - len(cut)]  # the last

        # with room again, the report reads what is there and names what is not
        roomy = tmp_path / "copy" / run_dir.name
        shutil.copytree(run_dir, roomy)
        analyse(roomy, spark)  # what `peerlab report` does
        metrics = json.loads((roomy / "analysis" / "metrics.json").read_text())
        assert sorted(metrics["ingest"]["logs_missing"]) == sorted(set(complete) - {p.name.split(".")[0] for p in stored})
        if cut:  # the cut log's last line, if cut mid-line, is left out and named
            assert all(p["log"] == cut[0].name for p in metrics["ingest"].get("lines", []))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
