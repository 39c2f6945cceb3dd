"""Adapter nodes on the docker backend: js-libp2p and py-libp2p containers built from their
Dockerfiles (node/adapters/*/Dockerfile), in one network with a kill and restart, latency from the
delay line on the host reaching each sandbox's namespace, kernel counters from the host side of each
veth; nothing left behind."""
import gzip
import json
from pathlib import Path

import pytest

from node import contract
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from tests.support.cli import docker_objects, run_netns

pytestmark = [pytest.mark.emulation, pytest.mark.docker, pytest.mark.slow, pytest.mark.exclusive]

MIXED = """
name: docker-adapters
seed: 5
nodes:
  count: 6
  groups:
    - {name: js, count: 3, implementation: js-libp2p}
    - {name: py, count: 3, implementation: py-libp2p}
protocol: {name: gossipsub, params: {heartbeat_interval: 0.5}}
topology: {algorithm: random, degree: 3}
network: {latency: {model: constant, one_way: 20ms}}
topics: {count: 1}
workload: {publishers: 4, rate: 4/s, warmup: 2s, duration: 6s, drain: 3s, message_size: 1KiB}
faults: [{at: 2.5s, action: kill, nodes: [n4], restart_after: 1s}]
calibration: {pairs: 3, throughput_nodes: 2}
"""


def test_js_and_py_containers_share_a_delayed_network(tmp_path: Path, docker_engine):
    before = run_netns()
    scenario = parse_scenario(MIXED + f"output: {{store: 'file://{tmp_path}'}}\n")
    run_dir = Runner(scenario, backend="docker").run()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "docker" and manifest["status"] == "completed"
    assert manifest["shaping"]["mode"] in ("netem", "delayline")
    cal = manifest["calibration"]
    assert len(cal["rtt"]) == 3 and all(r["measured_ms"] >= 40 for r in cal["rtt"]), cal["rtt"]
    logs = {}
    for node in manifest["plan"]["nodes"]:
        with gzip.open(run_dir / "events" / f"{node['id']}.jsonl.gz", "rt") as f:
            logs[node["id"]] = [json.loads(line) for line in f]
    for node, events in logs.items():
        assert contract.check_log([json.dumps(e) for e in events]) == [], node
    assert [e["type"] for e in logs["n4"]].count("start") == 2  # killed and restarted
    published = {e["msg_id"]: e for evs in logs.values() for e in evs if e["type"] == "publish_message"}
    ready = {n: max(e["ts"] for e in evs if e["type"] == "ready") for n, evs in logs.items()}
    expected = {m for m, e in published.items() if e["ts"] > ready[e["node"]] + 1e9}
    assert len(expected) >= 20
    for node, events in logs.items():
        if node == "n4":
            continue
        got = {e["msg_id"] for e in events if e["type"] in ("deliver_message", "publish_message")}
        assert expected <= got, f"{node} missed {sorted(expected - got)}"
    delivered = [e for evs in logs.values() for e in evs if e["type"] == "deliver_message"]
    assert min(e["ts"] - published[e["msg_id"]]["ts"] for e in delivered) >= 20e6  # delayed outside the nodes
    implementation = {n["id"]: n["implementation"] for n in manifest["plan"]["nodes"]}
    assert {implementation[e["peer"]] for e in delivered if implementation[e["node"]] == "js-libp2p"} == \
        {"js-libp2p", "py-libp2p"}
    with gzip.open(run_dir / "kernel_traffic.jsonl.gz", "rt") as f:
        last = {s["node"]: s for s in map(json.loads, f)}
    for node, events in logs.items():
        logged = sum(e["bytes"] for e in events if e["type"] == "send_rpc")
        assert last[node]["sent_bytes"] > logged > 0, node
    assert docker_objects(docker_engine) == []
    assert run_netns() == before
