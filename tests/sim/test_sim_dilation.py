"""Time dilation on the sim backend: virtual time is experiment time with an infinitely fast CPU, so a
dilated simulation records its factor and gives the undilated simulation's events, bit for bit."""
from __future__ import annotations

import gzip
import json

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.sim.sim_runner import NO_DILATION, SimRunner
from tests.support.scenarios import scenario_text

SCENARIO = scenario_text("simdilated", 3, """\
nodes: {count: 12}
protocol: gossipsub
network: {latency: {model: unit-square, scale: 60ms, base: 5ms}, bandwidth_up: 10mbit, jitter: 1ms}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 3, rate: 4/s, message_size: 10KB, warmup: 2s, duration: 3s, drain: 2s}
faults: [{at: 3s, action: kill, nodes: [n2], restart_after: 1s},
         {at: 2.5s, action: degrade, nodes: [n5], delay: 20ms, bandwidth: 2mbit, duration: 1s}]
calibration: {enabled: false}
""")


def _run(tmp_path, k: float):
    scenario = parse_scenario(SCENARIO + f"output: {{store: 'file://{tmp_path}/k{k:g}'}}\n", overrides=[f"dilation={k}"])
    run_dir = SimRunner(scenario, make_plan(scenario)).run()
    events = {p.name: gzip.open(p).read() for p in sorted((run_dir / "events").glob("*.jsonl.gz"))}
    return json.loads((run_dir / "manifest.json").read_text()), events


def test_a_dilated_simulation_gives_the_undilated_events_and_says_so(tmp_path):
    plain, plain_events = _run(tmp_path, 1)
    dilated, dilated_events = _run(tmp_path, 2.5)
    assert len(plain_events) == 12 and dilated_events == plain_events
    assert any(b'"deliver_message"' in e for e in plain_events.values())
    assert dilated["t0_ns"] == plain["t0_ns"] and dilated["faults_executed"] == plain["faults_executed"]
    assert dilated["dilation"] == {"factor": 2.5, "applied": False, "note": NO_DILATION}
    assert dilated["plan"]["dilation"] == 2.5 and plain["dilation"]["factor"] == 1
