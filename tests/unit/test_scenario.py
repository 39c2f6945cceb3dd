"""Scenario validation: every malformed input gives a short error naming the field, exit 2."""
from pathlib import Path

import pytest

from orchestrator.model.scenario import ScenarioError, json_schema, load_scenario, parse_scenario
from tests.support.cli import ROOT, peerlab

BASE = "name: t\nnodes: {count: 4}\n"

BAD = {
    "yaml syntax": ("name: [unclosed\nnodes: {count: 3}", "(yaml): line"),
    "empty file": ("", "empty"),
    "not a mapping": ("- a\n- b", "expected a mapping"),
    "wrong type": ("name: t\nnodes: {count: many}", "nodes.count"),
    "unknown key": (BASE + "netwrok: {}", "netwrok: unknown field"),
    "unknown nested key": (BASE + "network: {bandwith_up: 5mbit}", "network.bandwith_up: unknown field"),
    "zero count": ("name: t\nnodes: {count: 0}", "nodes.count"),
    "negative count": ("name: t\nnodes: {count: -3}", "nodes.count"),
    "unparseable unit": (BASE + "network: {bandwidth_up: fast}", "network.bandwidth_up: cannot read"),
    "zero bandwidth": (BASE + "network: {bandwidth_down: 0mbit}", "network.bandwidth_down"),
    "ambiguous bandwidth": (BASE + "network: {bandwidth_up: 5mbps}", "ambiguous"),
    "unknown protocol": (BASE + "protocol: kademlia-ish", "protocol: value 'kademlia-ish'"),
    "bad protocol param": (BASE + "protocol: {name: floodsub, params: {seen_ttl: -1}}", "protocol.params.seen_ttl"),
    "unknown protocol param": (BASE + "protocol: {name: floodsub, params: {D: 8}}", "protocol.params.D: unknown field"),
    "more publishers than nodes": (BASE + "workload: {publishers: 9}", "workload.publishers (9) exceeds nodes.count (4)"),
    "negative duration": (BASE + "workload: {duration: -5s}", "workload.duration"),
    "negative warmup": (BASE + "workload: {warmup: -1s}", "workload.warmup"),
    "latency model missing parameter": (BASE + "network: {latency: {model: unit-square}}", "network.latency.scale: Field required"),
    "unknown latency model": (BASE + "network: {latency: {model: moon}}", "network.latency: value 'moon'"),
    "fault on unknown node": (BASE + "faults: [{at: 1s, action: kill, nodes: [n99]}]", "faults[0].nodes"),
    "fault without targets": (BASE + "faults: [{at: 1s, action: kill}]", "exactly one of nodes"),
    "zipf larger than topics": (BASE + "topics: {count: 2, subscriptions: {model: zipf, alpha: 1, size: 5}}", "exceeds topics.count"),
    "unknown overlay": (BASE + "topology: {algorithm: hypercube}", "topology.algorithm: unknown overlay algorithm"),
    "edges_of without random": (BASE + "topology: {algorithm: gm, edges_of: cd-max}", "edges_of applies to algorithm: random"),
    "loss of one": (BASE + "network: {loss: 1.0}", "network.loss"),
    "unknown store scheme": (BASE + "output: {store: 'gs://bucket/runs'}", "output.store"),
    "s3 store without bucket": (BASE + "output: {store: 's3:///runs'}", "output.store"),
    "bad group param": ("name: t\nnodes: {count: 4, groups: [{name: a, count: 2, params: {seen_ttl: 0}}]}",
                        "nodes.groups[0].params.seen_ttl"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_scenarios_name_the_field(case):
    text, needle = BAD[case]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "s.yaml")
    assert needle in str(info.value), str(info.value)


def test_binary_garbage_is_refused():
    with pytest.raises(ScenarioError, match="not UTF-8"):
        parse_scenario(bytes(range(256)) * 4, "garbage.bin")
    with pytest.raises(ScenarioError, match="NUL"):
        parse_scenario("name: t\x00\x00", "nul.yaml")


def test_defaults_and_units():
    sc = parse_scenario(BASE + "network: {latency: {model: constant, one_way: 20ms}}\nworkload: {message_size: 2MiB}")
    assert sc.network.latency.one_way == pytest.approx(0.020)
    assert sc.network.bandwidth_up == 50_000_000
    assert sc.workload.message_size == 2 * 1024 * 1024
    assert sc.workload.rate == 1.0
    assert sc.protocol.name == "floodsub"
    assert sc.output.store == "file://./runs"


def test_overrides_apply_dotted_paths():
    sc = parse_scenario(BASE + "network: {latency: {model: constant, one_way: 50ms}}", overrides=["nodes.count=12", "network.latency.one_way=5ms", "protocol=floodsub",
                                         "workload.rate=3/s"])
    assert sc.nodes.count == 12
    assert sc.network.latency.one_way == pytest.approx(0.005)
    assert sc.workload.rate == 3
    with pytest.raises(ScenarioError, match="nodes.cuont: unknown field"):
        parse_scenario(BASE, overrides=["nodes.cuont=3"])
    with pytest.raises(ScenarioError, match="network.latency: missing 'model'"):
        parse_scenario(BASE, overrides=["network.latency.one_way=5ms"])
    with pytest.raises(ScenarioError, match="dotted.path=value"):
        parse_scenario(BASE, overrides=["nodes.count"])


def test_shipped_scenarios_validate():
    shared_data = (ROOT / ".." / "shared" / "data").resolve()
    for path in (ROOT / "scenarios").glob("*.yaml"):
        try:
            load_scenario(path, data_roots=[shared_data])
        except ScenarioError as err:
            # scenarios read measured data sets from ../shared/data (never copied into the project); in a
            # checkout without it, the error must name the field and the missing file, and nothing else
            if shared_data.is_dir():
                raise
            assert all("no such file: ../../shared/data/" in p for p in err.problems), str(err)


def test_json_schema_describes_sections():
    schema = json_schema()
    assert {"name", "nodes", "network", "workload", "faults"} <= set(schema["properties"])


@pytest.mark.parametrize("case", ["yaml syntax", "empty file", "unknown key", "more publishers than nodes"])
def test_cli_validate_exits_2_without_traceback(tmp_path: Path, case):
    path = tmp_path / "s.yaml"
    path.write_text(BAD[case][0])
    result = peerlab("validate", str(path))
    assert result.returncode == 2
    assert BAD[case][1] in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) <= 4


def test_cli_validate_binary_and_missing_file(tmp_path: Path):
    path = tmp_path / "garbage.yaml"
    path.write_bytes(bytes(range(256)))
    result = peerlab("validate", str(path))
    assert result.returncode == 2 and "not UTF-8" in result.stderr and "Traceback" not in result.stderr
    result = peerlab("validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_cli_validate_ok():
    result = peerlab("validate", "scenarios/quickstart.yaml")
    assert result.returncode == 0, result.stderr
    assert "30 nodes" in result.stdout


@pytest.mark.parametrize("faults, where", [
    ("[{at: 1s, action: kill, nodes: [n1, n1]}]", "faults[0]"),
    ("[{at: 1s, action: kill, nodes: [n0]}, {at: 2s, action: degrade, nodes: [n2, n1, n2], loss: 0.1}]", "faults[1]"),
    ("[{at: 1s, action: partition, groups: [[n0, n1], [n1, n2]]}, {at: 3s, action: heal}]", "faults[0]"),
    ("[{at: 1s, action: partition, groups: [[n0, n0], [n2]]}, {at: 3s, action: heal}]", "faults[0]"),
])
def test_a_fault_listing_a_node_twice_is_refused_naming_the_fault(faults, where):
    """A node twice in one fault's nodes, or on two sides of a partition (or twice on one side), is
    refused, naming which fault; the same nodes in different faults, or once each, are fine."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BASE + f"faults: {faults}", "s.yaml")
    assert f"{where}: a node is listed twice" in str(info.value), str(info.value)
    fine = ("faults: [{at: 1s, action: partition, groups: [[n0, n1], [n2]]}, {at: 3s, action: heal}, "
            "{at: 4s, action: kill, nodes: [n1, n2]}, {at: 5s, action: restart, nodes: [n1]}]")
    assert len(parse_scenario(BASE + fine).faults) == 4


def test_the_node_cap_refuses_5001_naming_the_field_and_its_limit_and_validates_5000():
    with pytest.raises(ScenarioError) as info:
        parse_scenario(BASE, "s.yaml", overrides=["nodes.count=5001"])
    assert "nodes.count: Input should be less than or equal to 5000 (got 5001)" in str(info.value), str(info.value)
    assert parse_scenario(BASE, overrides=["nodes.count=5000"]).nodes.count == 5000  # validation only: nothing planned
    done = peerlab("validate", "scenarios/quickstart.yaml", "--set", "nodes.count=5001", timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "nodes.count" in done.stderr and "5000" in done.stderr, done.stderr
