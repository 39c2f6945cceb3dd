"""The sim backend: a scenario simulated in virtual time and stored like an emulated run (manifest,
event logs, status); deterministic across processes; the fault timeline executed."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.sim.engine import Simulation
from tests.support.cli import peerlab
from tests.support.scenarios import scenario_text

SCENARIO = scenario_text("simsmall", 11, """\
nodes: {count: 24}
protocol: {name: gossipsub, params: {variant: v1.2}}
topology: {algorithm: random, degree: 6}
network: {latency: {model: unit-square, scale: 80ms, base: 5ms}, bandwidth_up: 20mbit, bandwidth_down: 20mbit,
          jitter: 2ms}
topics: {count: 2, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 6, rate: 5/s, message_size: 20KB, warmup: 3s, duration: 8s, drain: 3s}
faults: [{at: 5s, action: kill, nodes: [n3], restart_after: 2s}, {at: 6s, action: stop, nodes: [n4]}]
calibration: {enabled: false}
""")


def _events(run_dir: Path) -> dict[str, list[dict]]:
    return {p.name.split(".")[0]: [json.loads(line) for line in gzip.open(p, "rt")]
            for p in sorted((run_dir / "events").glob("*.jsonl.gz"))}


def _sim_run(tmp_path: Path, name: str, hashseed: str) -> Path:
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(SCENARIO + f"output: {{store: 'file://{tmp_path}/{name}'}}\n")
    result = peerlab("run", str(scenario), "--backend", "sim", "--no-report", timeout=300,
                     env={**os.environ, "PYTHONHASHSEED": hashseed})
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_simulated_run_is_stored_like_an_emulated_one_and_repeats_bit_for_bit(tmp_path: Path):
    first = _sim_run(tmp_path, "a", "1")
    second = _sim_run(tmp_path, "b", "2")   # another process, another string-hash order
    digest = [{p.name: hashlib.sha256(gzip.open(p).read()).hexdigest() for p in (d / "events").iterdir()}
              for d in (first, second)]
    assert digest[0] == digest[1] and len(digest[0]) == 24

    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "sim"
    assert json.loads((first / "status").read_text())["status"] == "completed"
    assert manifest["shaping"]["mode"] == "simulated"
    assert manifest["sim"]["engine_events"] > 0 and manifest["sim"]["sim_s_per_wall_s"] > 0
    t0 = manifest["t0_ns"]
    # the fault timeline in virtual time: exactly when planned
    assert [(f["action"], f["node"], f["offset_s"]) for f in manifest["faults_executed"]] == [
        ("kill", "n3", 5.0), ("stop", "n4", 6.0), ("restart", "n3", 7.0)]

    events = _events(first)
    plan = manifest["plan"]
    for node in plan["nodes"]:
        types = [e["type"] for e in events[node["id"]]]
        assert types[:2] == ["start", "behaviour"] and "t0" in types
        published = [e for e in events[node["id"]] if e["type"] == "publish_message"]
        if node["id"] not in ("n3", "n4"):   # every planned publish of a node that stayed up happened
            assert len(published) == len(node["schedule"]) and types[-1] == "stop"
    # killed: nothing logged while down, a new start on restart, deliveries again afterwards
    n3 = events["n3"]
    kill_ns, restart_ns = t0 + 5_000_000_000, t0 + 7_000_000_000
    assert not [e for e in n3 if kill_ns < e["ts"] < restart_ns]
    at_restart = [e["type"] for e in n3 if e["ts"] == restart_ns]
    assert at_restart[:2] == ["start", "behaviour"] and "t0" in at_restart   # as the runtime: t0 after joins
    assert any(e["type"] == "deliver_message" and e["ts"] > restart_ns + 500_000_000 for e in n3)
    # stopped gracefully: its last event is the stop; its peers saw it go
    assert events["n4"][-1]["type"] == "stop" and events["n4"][-1]["reason"] == "fault timeline"
    assert any(e["type"] == "disconnect" and e["peer"] == "n4" for n in events for e in events[n])


def test_bandwidth_is_what_the_simulation_delivers_by(tmp_path: Path):
    """One 1 MB message over one hop at 8 vs 80 Mbit/s: the serialisation time shows in the latency;
    at 80 Mbit/s the fresh connection's slow start does too (the window reaches the path's 200 KB
    after four 20 ms round trips), as over a real TCP connection."""
    text = """
name: bw
seed: 1
nodes: {count: 2}
topology: {algorithm: complete}
network: {latency: {model: constant, one_way: 10ms}, bandwidth_up: %s, bandwidth_down: %s}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 1, rate: 1/s, message_size: 1MB, warmup: 1s, duration: 1s, drain: 2s}
calibration: {enabled: false}
"""
    latency = {}
    for rate in ("8mbit", "80mbit"):
        plan = make_plan(parse_scenario(text % (rate, rate)))
        sim = Simulation(plan, keep_deliveries=True)
        sim.run()
        (t_pub, _, origin, _), = sim.sent
        other = "n1" if origin == "n0" else "n0"
        latency[rate] = sim.net.nodes[other].delivered[0].time - sim.t0 - t_pub
    assert latency["8mbit"] == pytest.approx(0.010 + 1_000_000 * 1.047 * 8 / 8e6, rel=0.01)
    serialisation = 1_000_000 * 1.047 * 8 / 80e6
    assert 0.010 + serialisation + 2 * 0.020 < latency["80mbit"] < 0.010 + serialisation + 4 * 0.020


TIMED = """
name: timed
seed: 2
nodes: {count: 30}
protocol: {name: scoutsubs, params: {op_resend: 2, check_delivery: 3, rpc_timeout: 2, dial_timeout: 2}}
topology: {algorithm: random, degree: 3}
network: {latency: {model: constant, one_way: 10ms}}
topics:
  predicates:
    - {filter: "ipfs T", subscribers: 8}
    - {filter: "surf T/price R 0 800", subscribers: 6, at: 14s}
workload: {publishers: 3, events: ["ipfs T", "surf T/price R 500 500"], rate: 2/s, warmup: 10s, duration: 10s,
           drain: 8s}
calibration: {enabled: false}
"""


@pytest.mark.spark
def test_timed_subscriptions_are_made_during_the_run_and_expected_only_from_then_on(tmp_path: Path, spark):
    from analysis.job import analyse

    plan = make_plan(parse_scenario(TIMED))
    late = {n.id: n.late_subscriptions for n in plan.nodes if n.late_subscriptions}
    assert len(late) == 6 and all(x == [(14.0, "price R 0 800/surf T")] for x in late.values())  # canonical
    assert not any("price R 0 800/surf T" in n.subscriptions for n in plan.nodes)
    scenario = tmp_path / "timed.yaml"
    scenario.write_text(TIMED + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    result = peerlab("run", str(scenario), "--backend", "sim", "--no-report", timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    t0 = json.loads((run_dir / "manifest.json").read_text())["t0_ns"]
    events = _events(run_dir)
    joins = {n: e["ts"] for n, evs in events.items() for e in evs if e["type"] == "join" and e["topic"].startswith("price")}
    assert set(joins) == set(late) and all(abs(ts - t0 - 14e9) < 1e6 for ts in joins.values())
    # by hand: a publish expects the start subscribers of "ipfs T", or the timed ones if made by then
    surf = [at for n in plan.nodes for at, topic, _ in n.schedule if topic != "ipfs T"]
    assert min(surf) < 14.0 <= max(surf)  # events before and after the timed subscriptions
    expected = sum(1 for n in plan.nodes for at, topic, _ in n.schedule for x in plan.nodes if x.id != n.id and (
        ("ipfs T" in x.subscriptions) if topic == "ipfs T" else (x.id in late and at >= 14.0)))
    metrics = analyse(run_dir, spark)
    assert metrics["protocol"]["subscribers"]["expected"] == expected
    assert metrics["delivery_ratio"] > 0.9
    assert metrics["protocol"]["subscription_latency_ms"]["subscriptions"] == 14


@pytest.mark.slow
@pytest.mark.parametrize("scenario, nodes", [("churn-gossipsub", 40), ("smartpubsub-fault", 60)])
def test_same_seed_same_events_in_any_process(tmp_path, scenario, nodes):
    """Bit-for-bit across processes: nothing may depend on the order a set of strings iterates in
    (PYTHONHASHSEED differs between processes). GossipSub under churn prunes oversubscribed meshes;
    reliable ScoutSubs acknowledges an event to every node it came from (a set of them)."""
    logs = []
    for hash_seed in ("1", "2"):
        store = tmp_path / hash_seed
        result = peerlab("run", f"scenarios/{scenario}.yaml", "--backend", "sim", "--no-report",
                         "--set", f"output.store=file://{store}", "--set", "workload.duration=20s",
                         env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert result.returncode == 0, result.stderr[-2000:]
        run_dir = Path(result.stdout.strip().splitlines()[-1])
        logs.append({p.name: gzip.decompress(p.read_bytes()) for p in sorted((run_dir / "events").glob("*.gz"))})
    assert logs[0].keys() == logs[1].keys() and len(logs[0]) == nodes
    assert [name for name in logs[0] if logs[0][name] != logs[1][name]] == []


def test_a_simulated_core_draws_the_random_stream_its_node_process_would(tmp_path: Path):
    """Same seed, same core randomness in both engines, so a simulated run forms the meshes and picks
    the gossip targets the emulated run of that plan does (engine comparisons compare one network):
    each node's core starts from the stream the node process's runtime gives it, and a restarted node
    from that stream afresh, as a new process does."""
    from node.config import NodeConfig
    from node.process.runtime import NodeRuntime

    plan = make_plan(parse_scenario(SCENARIO))
    sim = Simulation(plan)
    sim.start_up()
    for node_id in ("n0", "n5"):
        cfg = NodeConfig(run_id="r", node_id=node_id, protocol="gossipsub", seed=plan.seed, nodes=len(plan.nodes),
                         listen={"host": "127.0.0.1", "port": 0}, event_log=str(tmp_path / f"{node_id}.jsonl"),
                         control={"token": "t" * 16, "unix": str(tmp_path / f"{node_id}.sock")})
        process_core = NodeRuntime(cfg).core
        simulated = sim.net.nodes[node_id].core.rng
        fresh = process_core.rng.getstate()
        assert NodeRuntime(cfg).core.rng.getstate() == fresh  # (a second process: the same again)
        sim.kill(node_id)  # the fault timeline's kill and restart
        sim.start(node_id)
        restarted = sim.net.nodes[node_id].core.rng
        assert restarted.getstate() == fresh
        assert simulated is not restarted and simulated.getstate() != fresh  # drawn from since T0's start-up
