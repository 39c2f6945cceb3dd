"""GossipSub over real processes, sockets and shaped links: every variant feature at once (all-3:
IDONTWANT on the priority path, 3-parallel staggering with its timers, 4 fragments)."""
import gzip
import json
from pathlib import Path

import pytest

from tests.support.cli import peerlab, run_netns

pytestmark = [pytest.mark.emulation, pytest.mark.slow]


def test_all_variant_features_deliver_every_message(tmp_path: Path):
    result = peerlab("run", "scenarios/gossipsub-large.yaml", "--no-report",
                     "--set", f"output.store=file://{tmp_path}/runs", "--set", "gossipsub.variant=all-3",
                     "--set", "nodes.count=16", "--set", "workload.message_size=300KB",
                     "--set", "workload.publishers=3", "--set", "workload.rate=30/m", "--set", "workload.drain=6s", "--set", "workload.warmup=4s",
                     "--set", "topology.degree=6", "--set", "calibration.enabled=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    events = []
    for path in (run_dir / "events").glob("*.jsonl.gz"):
        with gzip.open(path, "rt") as f:
            events += [json.loads(line) for line in f]
    published = {e["msg_id"] for e in events if e["type"] == "publish_message"}
    assert len(published) == 3  # 3 publishers, one message each, 2 s apart
    for msg_id in published:
        receivers = {e["node"] for e in events if e["type"] == "deliver_message" and e["msg_id"] == msg_id}
        assert len(receivers) == 15, msg_id  # every other node, whole and verified
    assert sum(e["type"] == "publish_fragment" for e in events) == 3 * 4
    assert any(e["type"] == "send_rpc" and e.get("idontwant") for e in events)
    assert run_netns(run_dir) == set()


@pytest.mark.spark
def test_variant_matrix_runs_each_variant_and_prints_one_table(tmp_path: Path):
    result = peerlab("run", "scenarios/gossipsub-large.yaml", "--matrix", "gossipsub.variant=v1.1,stagger-seq",
                     "--set", f"output.store=file://{tmp_path}/runs", "--set", "nodes.count=12",
                     "--set", "workload.message_size=100KB", "--set", "workload.publishers=4", "--set", "workload.rate=30/m",
                     "--set", "workload.drain=5s", "--set", "workload.warmup=4s", "--set", "topology.degree=5",
                     "--set", "calibration.enabled=false", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dirs = [Path(line) for line in result.stdout.split()]
    assert len(run_dirs) == 2
    metrics = [json.loads((d / "analysis" / "metrics.json").read_text()) for d in run_dirs]
    assert [m["delivery_ratio"] for m in metrics] == [1.0, 1.0]
    v11, seq = (m["protocol"] for m in metrics)
    assert v11["control"]["idontwant"] == 0 and v11["stagger_saves"]["count"] == 0
    assert seq["control"]["idontwant"] > 0 and seq["idontwant_saves"]["count"] > 0
    assert v11["warmup_messages"] == 2 and v11["measured_messages"] == 2  # 4 published, 2 warm-up
    table = result.stderr[result.stderr.index("comparison"):]
    assert "variant=v1.1" in table and "variant=stagger-seq" in table and "idontwant_saves" in table
    assert run_netns(*run_dirs) == set()
