"""Importing a gossipsub-interop experiment (`peerlab contract interop-import`): an exported scenario
imported over itself plans the same; a script's parameters, validation delay, topic names, late
subscriptions and links come through; what has no scenario form is refused in one line naming it.
The scenario's given parts (topology.dial, topics.subscriptions model given, workload.schedule) are
checked like any section."""
from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, load_scenario, validate_data
from tests.support.cli import peerlab


def export_then_import(tmp_path, scenario: str, *extra: str):
    params, imported = tmp_path / "params.json", tmp_path / "imported.yaml"
    done = peerlab("contract", "interop-export", scenario, "-o", str(params))
    assert done.returncode == 0, done.stderr
    done = peerlab("contract", "interop-import", str(params), "--base", scenario, "-o", str(imported), *extra)
    assert done.returncode == 0, done.stderr
    return imported, done


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["scenarios/interop-subnet-blob-msg.yaml", "scenarios/interop-simple-fanout.yaml"])
def test_an_exported_scenario_imported_over_itself_plans_the_same(tmp_path, scenario):
    imported, done = export_then_import(tmp_path, scenario)
    before = make_plan(load_scenario(scenario)).model_dump()
    after = make_plan(load_scenario(imported)).model_dump()
    assert after.pop("topology") == "given" and before.pop("topology") == "random-at-least"
    assert after.pop("scenario") == before.pop("scenario") + "-imported"
    assert after == before  # every node's links, subscriptions, schedule, parameters; the network, the timing
    assert sum(len(n["schedule"]) for n in after["nodes"]) == 16
    assert "100 nodes" in done.stderr and "16 publishes" in done.stderr


SCRIPT = {"script": [
    {"type": "initGossipSub", "gossipSubParams": {"D": 6, "Dlo": 4, "HeartbeatInterval": 700_000_000}},
    {"type": "setTopicValidationDelay", "topicID": "blobs", "delaySeconds": 0.005},
    {"type": "subscribeToTopic", "topicID": "blobs"},
    {"type": "ifNodeIDEquals", "nodeID": 2, "instruction": {"type": "subscribeToTopic", "topicID": "news"}},
    {"type": "waitUntil", "elapsedSeconds": 2},
    {"type": "ifNodeIDEquals", "nodeID": 0, "instruction": {"type": "connect", "connectTo": [1, 2]}},
    {"type": "ifNodeIDEquals", "nodeID": 3, "instruction": {"type": "connect", "connectTo": [2]}},
    {"type": "waitUntil", "elapsedSeconds": 20},
    {"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {"type": "subscribeToTopic", "topicID": "news"}},
    {"type": "ifNodeIDEquals", "nodeID": 3,
     "instruction": {"type": "publish", "messageID": 7, "messageSizeBytes": 2048, "topicID": "blobs"}},
    {"type": "waitUntil", "elapsedSeconds": 23},
    {"type": "ifNodeIDEquals", "nodeID": 2,
     "instruction": {"type": "publish", "messageID": 8, "messageSizeBytes": 100, "topicID": "news"}},
]}


def test_a_script_without_a_base_gives_its_parameters_names_links_and_late_subscriptions(tmp_path):
    params = tmp_path / "their.json"
    params.write_text(json.dumps(SCRIPT))
    out = tmp_path / "their.yaml"
    done = peerlab("contract", "interop-import", str(params), "--lead", "15", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "their eight regions" in done.stderr
    plan = make_plan(load_scenario(out))
    assert plan.topics == ["blobs", "news"] and len(plan.nodes) == 4
    n0, n1, n2, n3 = plan.nodes
    assert n0.params["D"] == 6 and n0.params["D_lo"] == 4 and n0.params["heartbeat_interval"] == 0.7
    assert n0.params["validation"]["delay"] == 0.005
    assert n0.dial == ["n1", "n2"] and n3.dial == ["n2"] and n1.dial == n2.dial == []
    assert n2.subscriptions == ["blobs", "news"] and n1.subscriptions == ["blobs"]
    assert n1.late_subscriptions == [(5.0, "news")]  # 20 s from the start, T0 at 15
    assert n3.schedule == [(5.0, "blobs", 2048)] and n2.schedule == [(8.0, "news", 100)]
    assert (plan.warmup, plan.duration) == (5.0, 3.0)
    assert load_scenario(out).network.latency.model == "weighted-regions"


@pytest.mark.parametrize("change, named", [
    (lambda s: s["script"].insert(5, {"type": "ifNodeIDEquals", "nodeID": 3, "instruction": {
        "type": "publish", "messageID": 1, "messageSizeBytes": 10, "topicID": "blobs"}}),
     "node 3's publish on blobs at 2 s from the binaries' start, before T0 (--lead 15)"),
    (lambda s: s["script"].append({"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {
        "type": "initGossipSub", "gossipSubParams": {"D": 8}}}), "nodes 0 and 1 differ in initGossipSub"),
    (lambda s: s["script"][0]["gossipSubParams"].update(SlowHeartbeatWarning=0.1),
     "script[0].gossipSubParams.SlowHeartbeatWarning: peerlab has no counterpart"),
    (lambda s: s["script"].append({"type": "publishPartial", "topicID": "blobs", "groupID": 1, "publishToNodeIDs": []}),
     "script[12]: publishPartial has no peerlab counterpart"),
    (lambda s: s["script"].append({"type": "waitUntil"}), "does not follow the gossipsub-interop instruction schema"),
    (lambda s: s["script"].append({"type": "subscribeToTopic", "topicID": "blobs", "partial": True}),
     "script[12]: a partial subscription has no peerlab counterpart"),
    (lambda s: s["script"].append({"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {
        "type": "connect", "connectTo": [3]}}), "node 1 connects to 3 at 23 s from the binaries' start, after T0"),
])
def test_what_a_scenario_cannot_hold_is_refused_in_one_line_naming_it(tmp_path, change, named):
    script = json.loads(json.dumps(SCRIPT))
    change(script)
    params = tmp_path / "their.json"
    params.write_text(json.dumps(script))
    done = peerlab("contract", "interop-import", str(params))
    assert done.returncode == 2 and named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_their_experiments_per_node_heartbeat_spread_and_null_parameters_are_left_to_the_defaults(tmp_path):
    """Their experiment.py gives each node its own HeartbeatInitialDelay (100.1 ms, 100.2 ms, ...) and
    null means the implementation's default: the import leaves both out, and says so for the first."""
    script = json.loads(json.dumps(SCRIPT))
    init = script["script"].pop(0)
    script["script"][:0] = [{"type": "ifNodeIDEquals", "nodeID": i, "instruction": {
        "type": "initGossipSub", "gossipSubParams": {**init["gossipSubParams"], "HeartbeatInitialDelay": 100_000_000 + i * 100_000,
                                                      "FanoutTTL": None}}} for i in range(4)]
    params = tmp_path / "their.json"
    params.write_text(json.dumps(script))
    out = tmp_path / "their.yaml"
    done = peerlab("contract", "interop-import", str(params), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "note: heartbeat_initial_delay differs per node (0.1 to 0.1003 s" in done.stderr
    node = make_plan(load_scenario(out)).nodes[0]
    default = make_plan(validate_data({"name": "d", "nodes": {"count": 1}, "protocol": "gossipsub"})).nodes[0].params
    assert node.params["D"] == 6 and node.params["heartbeat_interval"] == 0.7
    assert all(node.params[k] == default[k] for k in ("heartbeat_initial_delay", "fanout_ttl"))


GIVEN = {"name": "given", "nodes": {"count": 4}, "protocol": "gossipsub",
         "topology": {"algorithm": "given", "dial": {0: [1, 2], 3: [2]}},
         "topics": {"names": ["a", "b"], "subscriptions": {"model": "given", "nodes": {0: ["a"], 1: ["a", "b"]},
                                                            "late": [{"at": "3s", "node": 2, "topic": "b"}]}},
         "workload": {"warmup": "2s", "duration": "4s",
                      "schedule": [{"at": "2s", "node": 0, "topic": "a", "size": "1KiB"}]}}


def given(**changes) -> dict:
    data = yaml.safe_load(yaml.safe_dump(GIVEN))
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = data
        for p in parents:
            target = target[p]
        target[last] = value
    return data


def test_given_parts_plan_as_listed():
    plan = make_plan(validate_data(given()))
    assert [n.dial for n in plan.nodes] == [["n1", "n2"], [], [], ["n2"]]
    assert plan.nodes[2].neighbours == ["n0", "n3"]
    assert plan.topics == ["a", "b"] and plan.nodes[1].subscriptions == ["a", "b"]
    assert plan.nodes[2].late_subscriptions == [(3.0, "b")] and plan.nodes[0].schedule == [(2.0, "a", 1024)]


@pytest.mark.parametrize("changes, named", [
    ({"topology__dial": {0: [4]}}, "topology.dial.0: node 4 does not exist"),
    ({"topology__dial": {0: [1], 1: [0]}}, "nodes 1 and 0 are linked twice"),
    ({"topology__dial": {2: [2]}}, "node 2 dials itself"),
    ({"topology__algorithm": "random"}, "dial goes with algorithm: given"),
    ({"topics__subscriptions__nodes": {0: ["c"]}}, "subscriptions.nodes.0: 'c' is not a topic"),
    ({"topics__count": 3}, "count (3) and names (2) disagree"),
    ({"workload__schedule": [{"at": "7s", "node": 0, "topic": "a", "size": 10}]},
     "schedule[0].at: 7 s is outside the publishing window"),
    ({"workload__schedule": [{"at": "2s", "node": 9, "topic": "a", "size": 10}]}, "schedule[0].node: node 9 does not exist"),
    ({"workload__schedule": [{"at": "2s", "node": 0, "topic": "z", "size": 10}]}, "schedule[0].topic: 'z' is not a topic"),
    ({"workload__rate": "2/s"}, "schedule lists every publish; leave out rate"),
    ({"topics__subscriptions__nodes": {-1: ["a"]}}, "subscriptions.nodes.-1: node -1 does not exist"),
])
def test_given_parts_that_do_not_fit_are_refused_naming_the_field(changes, named):
    with pytest.raises(ScenarioError) as refused:
        validate_data(given(**changes))
    assert named in str(refused.value)


def test_named_topics_take_an_attacker_and_a_given_schedules_publishers_are_never_drawn_to_attack():
    data = given()
    data["nodes"]["count"] = 12
    data["attackers"] = [{"behaviour": "topic-drop", "count": 11, "topic": "b"}]
    plan = make_plan(validate_data(data))
    publisher = plan.nodes[0]
    assert publisher.role == "honest" and publisher.schedule == [(2.0, "a", 1024)]
    assert all(n.role == "topic-drop" and n.subscriptions[-1] == "b" for n in plan.nodes[1:])
    assert plan.nodes[1].subscriptions == ["a", "b"]  # in the plan's topic order
