"""Topiary on real nodes: epochs end, links are really dropped and new ones dialled through the
shaped data plane, a topic-drop attacker's drops are logged, and the analysis draws per-epoch
curves. Short on purpose (the headline comparison is scenarios/topiary-vs-random.yaml, measured in
docs/protocols/topiary.md)."""
import gzip
import json
from pathlib import Path

import pytest

from analysis.job import analyse
from tests.support.cli import peerlab, run_netns

pytestmark = [pytest.mark.emulation, pytest.mark.spark, pytest.mark.slow]

SCENARIO = """
name: topiary-small
seed: 3
nodes: {count: 16}
protocol: {name: topiary, params: {epoch: 3.0, settle: 0.5}}
topology: {degree: 3}
network: {latency: {model: unit-square, scale: 100ms, base: 2ms}, latency_bucket: 2ms}
topics: {count: 4, subscriptions: {model: interest, rate: 0.5}}
attackers: [{behaviour: topic-drop, count: 3, topic: t1}]
workload: {publishers: 13, publish_topics: subscribed, rate: 10/s, message_size: 256B, warmup: 2s,
           duration: 18s, drain: 2s}
analysis: {epoch_window: 3s}
calibration: {pairs: 2, throughput_nodes: 1}
"""


def test_topiary_rewires_real_connections_and_reports_per_epoch(tmp_path: Path, spark):
    scenario = tmp_path / "topiary-small.yaml"
    scenario.write_text(SCENARIO)
    result = peerlab("run", str(scenario), "--set", f"output.store=file://{tmp_path}/runs", "--no-report",
                     timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run = Path(result.stdout.strip().splitlines()[-1])
    analyse(run, spark)  # the report `peerlab run` makes, on this worker's Spark session
    manifest = json.loads((run / "manifest.json").read_text())
    events = [json.loads(line) for f in sorted((run / "events").glob("*.jsonl.gz"))
              for line in gzip.open(f, "rt").read().splitlines()]
    t0 = manifest["t0_ns"]
    epochs = [e for e in events if e["type"] == "topiary_epoch"]
    attackers = {n["id"] for n in manifest["plan"]["nodes"] if n["role"] == "topic-drop"}
    assert {e["node"] for e in epochs} == {n["id"] for n in manifest["plan"]["nodes"]}
    # explored peers were dialled and came up as outbound connections after T0, beyond the planned ones
    planned = {(n["id"], p) for n in manifest["plan"]["nodes"] for p in n["dial"]}
    explored = {(e["node"], p) for e in epochs for p in e["explored"].split(",") if p}
    came_up = {(e["node"], e["peer"]) for e in events
               if e["type"] == "connect" and e["outbound"] and e["ts"] > t0}
    assert explored - planned and (explored - planned) & came_up
    dropped = {(e["node"], p) for e in epochs for p in e["dropped"].split(",") if p}
    closed = {(e["node"], e["peer"]) for e in events if e["type"] == "disconnect"}
    assert dropped and dropped <= closed
    assert any(e["type"] == "drop_rpc" and e["reason"] == "attack: topic-drop" and e["node"] in attackers
               for e in events)
    metrics = json.loads((run / "analysis" / "metrics.json").read_text())
    per_epoch = metrics["protocol"]["per_epoch"]
    assert len(per_epoch["receive_rate"]) == 6 and per_epoch["victim_receive_rate"]
    assert metrics["protocol"]["victim_topics"] == ["t1"]
    assert metrics["delivery_ratio"] >= 0.9
    report = (run / "analysis" / "report.html").read_text()
    assert "receive rate per epoch" in report.lower() and report.count("data:image/png") >= 4
    assert run_netns(run) == set()
