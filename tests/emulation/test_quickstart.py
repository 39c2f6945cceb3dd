"""The README's quickstart, exactly as a user runs it (plus a private store): the whole spine."""
import json
import time
from pathlib import Path

import pytest

from tests.support.cli import peerlab, run_netns

pytestmark = [pytest.mark.emulation, pytest.mark.spark, pytest.mark.slow, pytest.mark.exclusive]


def test_quickstart_end_to_end(tmp_path: Path):
    before = run_netns()
    started = time.monotonic()
    result = peerlab("run", "scenarios/quickstart.yaml", "--set", f"output.store=file://{tmp_path}/runs", timeout=600)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    assert (run_dir / "manifest.json").is_file()
    assert len(list((run_dir / "events").glob("*.jsonl.gz"))) == 30
    assert (run_dir / "analysis" / "report.html").is_file()
    m = json.loads((run_dir / "analysis" / "metrics.json").read_text())
    for key in ("delivery_ratio", "latency_ms", "coverage_latency_ms", "duplicates_per_node", "bytes", "nodes",
                "messages", "shaping"):
        assert key in m
    assert set(m["latency_ms"]) >= {"p50", "p90", "p99", "mean", "max"}
    assert set(m["coverage_latency_ms"]) >= {"L15", "L50", "L90", "L100"}
    assert set(m["bytes"]) >= {"data_sent", "control_sent"}
    assert set(m["shaping"]) == {"mode", "latency_error_pct", "bandwidth_error_pct"}

    assert m["nodes"] == 30 and m["messages"] == 60
    assert m["delivery_ratio"] == 1.0
    # floodsub over a complete graph: one hop of 50 ms (the quickest delivery: the shaping's own), plus
    # queueing on a 2-core machine that runs other tests beside this one (the median)
    assert 50.0 <= m["latency_ms"]["min"] <= 55.0 and m["latency_ms"]["p50"] <= 80.0, m["latency_ms"]
    assert m["coverage_latency_ms"]["L100"] >= m["coverage_latency_ms"]["L15"] >= 50.0
    # (the error of the pings' medians: what the run's frames met, loaded machine included)
    assert m["shaping"]["bandwidth_error_pct"] <= 10 and m["shaping"]["latency_error_pct"] <= 25
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for r in manifest["calibration"]["rtt"]:  # the quickest ping: the shaping's own (load only adds)
        assert abs(r["min_ms"] - 100.0) <= 10.0 + 1.0, r
    # admission's estimate against what the run's processes really took at their peak
    admitted = manifest["admission"]
    assert admitted["checked"] and abs(admitted["estimate_error_pct"]) <= 25, admitted
    assert run_netns() == before
    print(f"quickstart took {elapsed:.1f}s including the report")
