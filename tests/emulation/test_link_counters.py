"""Traffic measured outside the node: the kernel's counters on every node's link, sampled each second
into the run, against what peerlab's own nodes logged they sent."""
import gzip
import json

import pytest

from analysis.kernel_traffic import HEADER_BYTES, kernel_summary, per_node_totals
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from tests.support.scenarios import FLOODSUB_SIX, scenario_text

pytestmark = [pytest.mark.emulation, pytest.mark.slow]

SCENARIO = scenario_text("counters", 2, FLOODSUB_SIX, """\
workload: {publishers: 3, rate: 6/s, warmup: 1s, duration: 4s, drain: 1s, message_size: 16KiB}
calibration: {enabled: false}
""")


def test_link_counters_match_what_the_nodes_logged(tmp_path):
    scenario = parse_scenario(SCENARIO + f"output: {{store: 'file://{tmp_path}'}}\n")
    run_dir = Runner(scenario, make_plan(scenario)).run()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["kernel_traffic"]["interval_s"] == 1.0
    with gzip.open(run_dir / "kernel_traffic.jsonl.gz", "rt") as f:
        samples = [json.loads(line) for line in f]
    per_sample = {}
    for s in samples:
        per_sample.setdefault(s["ts"], set()).add(s["node"])
    assert all(nodes == {f"n{i}" for i in range(6)} for nodes in per_sample.values())
    assert len(per_sample) >= 6  # a sample a second over a run of 6 s and more

    logged = {}
    for node in range(6):
        with gzip.open(run_dir / "events" / f"n{node}.jsonl.gz", "rt") as f:
            logged[f"n{node}"] = sum(e["bytes"] for e in map(json.loads, f) if e["type"] == "send_rpc")
    kernel = per_node_totals(samples)
    for node, sent in logged.items():
        payload = kernel[node]["sent_bytes"] - HEADER_BYTES * kernel[node]["sent_packets"]
        # what the sockets carried is what the node wrote: its frames (plus the calibration-free run's
        # nothing else); the headers of every packet come on top
        assert sent > 0 and abs(payload - sent) <= 0.05 * sent, (node, payload, sent)
        assert kernel[node]["sent_bytes"] > sent
    summary = kernel_summary(samples, None, logged)
    assert summary["nodes"] == 6 and abs(summary["payload_over_logged"] - 1) <= 0.05
