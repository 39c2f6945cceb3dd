"""The gossipsub-interop contract's pieces without a process: the script a node's config becomes, the
message ids, the schema, the stdout lines turned into events, the sockets read from /proc/net/tcp."""
import json
import os

import pytest

from node.adapters import get_adapter, interop_adapters
from node.eventlog import check_event
from node.interop import script, sockets
from node.interop.shim import hosts_file, interop_peer_id
from node.interop.stdout import Stdout, unix_ns
from tests.support.cli import peerlab

CONFIG = {"node_id": "n3", "params": {"D": 6, "heartbeat_interval": 0.7, "prune_backoff": 60},
          "subscriptions": ["t0"], "dial": ["n1", "n7"], "neighbours": ["n1", "n2", "n7"],
          "late_subscriptions": [[4.0, "t1"]], "schedule": [[2.0, "t0", 1024], [5.0, "t1", 50_000], [9.0, "t0", 3]]}


def test_a_message_id_names_the_peerlab_message_its_origin_and_size():
    for origin, seq, size in [("n0", 0, 8), ("n3", 2, 50_000), ("n99999", 65535, (1 << 24) - 1)]:
        assert script.message_of(script.message_id(origin, seq, size)) == (f"{origin}-{seq}", origin, size)
    ids = {script.message_id(f"n{o}", s, 1024) for o in range(50) for s in range(50)}
    assert len(ids) == 2500
    with pytest.raises(ValueError, match="65536 messages per node"):
        script.message_id("n1", 65536, 1024)


def test_parameters_take_go_names_and_nanoseconds_and_one_without_a_name_is_refused():
    assert script.gossipsub_params(CONFIG["params"]) == {"D": 6, "HeartbeatInterval": 700_000_000,
                                                         "PruneBackoff": 60_000_000_000}
    with pytest.raises(ValueError, match="protocol.params.flood_publish: .*GossipSubParams"):
        script.gossipsub_params({"flood_publish": False})


def test_a_node_starting_before_t0_gets_its_whole_schedule_in_whole_seconds_from_its_start():
    s = script.node_script(CONFIG, t0_after_start=5, connect_at=2, end_s=12.5)
    assert s[0] == {"type": "initGossipSub", "gossipSubParams": script.gossipsub_params(CONFIG["params"])}
    assert s[1:4] == [{"type": "subscribeToTopic", "topicID": "t0"}, {"type": "waitUntil", "elapsedSeconds": 2},
                      {"type": "connect", "connectTo": [1, 7]}]
    timed = [(s[i]["elapsedSeconds"], s[i + 1]) for i in range(4, len(s) - 1, 2)]
    assert [(t, a["type"], a.get("topicID")) for t, a in timed] == [
        (7, "publish", "t0"), (9, "subscribeToTopic", "t1"), (10, "publish", "t1"), (14, "publish", "t0")]
    # the binary exits when its script ends: the script waits for the run's end, T0 + 12.5 s rounded up
    assert s[-1] == {"type": "waitUntil", "elapsedSeconds": 5 + 13}
    assert timed[2][1]["messageSizeBytes"] == 50_000 and timed[3][1]["messageSizeBytes"] == 8  # at least the id
    assert script.message_of(timed[2][1]["messageID"]) == ("n3-1", "n3", 50_000)
    assert script.problems({"script": s}) == []


def test_a_validation_delay_is_set_on_every_topic_the_node_will_join_before_it_joins():
    config = {**CONFIG, "params": {"validation": {"rule": "accept", "origins": [], "max_size": None, "delay": 0.005}}}
    s = script.node_script(config, t0_after_start=5, connect_at=2, end_s=20)
    assert s[:4] == [{"type": "initGossipSub", "gossipSubParams": {}},
                     {"type": "setTopicValidationDelay", "topicID": "t0", "delaySeconds": 0.005},
                     {"type": "setTopicValidationDelay", "topicID": "t1", "delaySeconds": 0.005},
                     {"type": "subscribeToTopic", "topicID": "t0"}]
    with pytest.raises(ValueError, match="validation: .*only a delay"):
        script.node_script({**config, "params": {"validation": {"rule": "max-size", "max_size": 10}}}, 5, 2, 20)
    with pytest.raises(ValueError, match="a delay it waits .* work sleep"):  # the contract's validation is a wait
        script.node_script({**config, "params": {"validation": {"delay": 0.005, "work": "cpu"}}}, 5, 2, 20)


def test_a_restarted_node_skips_the_publishes_behind_it_and_subscribes_at_once():
    s = script.node_script(CONFIG, t0_after_start=-6, connect_at=0, end_s=12)  # started at T0 + 6 s
    timed = [(s[i]["elapsedSeconds"], s[i + 1]) for i in range(4, len(s) - 1, 2)]
    assert [(t, a["type"]) for t, a in timed] == [(0, "subscribeToTopic"), (3, "publish")]
    assert s[-1] == {"type": "waitUntil", "elapsedSeconds": 6}  # T0 + 12 s on its clock
    assert script.message_of(timed[1][1]["messageID"])[0] == "n3-2"


def test_a_schedule_off_whole_seconds_is_refused_naming_the_message():
    with pytest.raises(ValueError, match=r"n3's message n3-0 at 2\.5 s after T0: .*whole seconds"):
        script.timed_actions({**CONFIG, "schedule": [[2.5, "t0", 1024]]})


def test_the_whole_experiment_is_one_script_in_time_order_that_follows_the_schema():
    other = {**CONFIG, "node_id": "n1", "dial": [], "late_subscriptions": [], "schedule": [[3.0, "t0", 100]]}
    params = script.experiment([CONFIG, other], t0_after_start=5, connect_at=2, end_s=30)
    assert script.problems(params) == []
    # every binary runs the script to its end and exits: the last instruction waits for the run's end
    assert params["script"][-1] == {"type": "waitUntil", "elapsedSeconds": 35}
    waits = [i["elapsedSeconds"] for i in params["script"] if i["type"] == "waitUntil"]
    assert waits == sorted(waits) and len(waits) == len(set(waits))
    mine = [i["instruction"] for i in params["script"] if i.get("nodeID") == 3]
    assert [i["type"] for i in mine].count("publish") == 3
    assert {i["instruction"]["type"] for i in params["script"] if i.get("nodeID") == 1} == \
        {"initGossipSub", "subscribeToTopic", "publish"}


@pytest.mark.parametrize("broken, where", [
    ({"type": "waitUntil", "elapsedSeconds": 1.5}, "script/0"),
    ({"type": "publish", "messageID": 1, "topicID": "t"}, "script/0"),
    ({"type": "initGossipSub", "gossipSubParams": {"Degree": 8}}, "script/0"),
    ({"type": "ifNodeIDEquals", "nodeID": 1, "instruction": {"type": "jump"}}, "script/0"),
])
def test_a_params_file_off_the_schema_is_named(broken, where):
    found = script.problems({"script": [broken]})
    assert found and found[0].startswith(where)


def test_stdout_lines_become_first_copies_then_duplicates_with_their_sender():
    names = {interop_peer_id(i): f"n{i}" for i in range(4)}
    out = Stdout("n3", names, ["t0"])
    mid, own = script.message_id("n2", 1, 2048), script.message_id("n3", 1, 1024)
    lines = [json.dumps({"time": "2026-11-27T23:00:00.123456789Z", "msg": "PeerID", "id": interop_peer_id(3),
                         "node_id": 3}),
             "not json: a binary's own chatter",
             json.dumps({"time": "2026-11-27T23:00:01.5+00:00", "msg": "Received Message", "id": str(mid),
                         "from": interop_peer_id(1)}),
             json.dumps({"time": "2026-11-27T23:00:01.6Z", "msg": "Received Message", "id": str(mid),
                         "from": interop_peer_id(0), "topic": "t0"}),
             json.dumps({"time": "2026-11-27T23:00:02Z", "msg": "Publishing"}),
             json.dumps({"time": "2026-11-27T23:00:03Z", "msg": "Received Message", "id": str(own),
                         "from": interop_peer_id(2)})]  # its own message, come back
    events = [e for line in lines for e in out.events(line)]
    assert [e["type"] for e in events] == ["ready", "deliver_message", "duplicate_message", "duplicate_message"]
    assert events[0]["ts"] == unix_ns("2026-11-27T23:00:00Z") + 123_456_789
    assert events[1] == {"ts": unix_ns("2026-11-27T23:00:01Z") + 500_000_000, "type": "deliver_message",
                         "topic": "t0", "msg_id": "n2-1", "origin": "n2", "peer": "n1", "size": 2048}
    assert events[2]["peer"] == "n0" and events[2]["msg_id"] == "n2-1"
    assert events[3]["peer"] == "n2" and events[3]["msg_id"] == "n3-1"
    for e in events:
        check_event({**e, "node": "n3"})


def test_the_peer_id_is_the_contracts_ed25519_seeded_by_the_node_index():
    # as go-libp2p derives them (the PeerID lines of tests/support/interop_node as node0 and node1)
    assert interop_peer_id(0) == "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
    assert interop_peer_id(1) == "12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X"
    assert len({interop_peer_id(i) for i in range(100)}) == 100


def test_established_connections_on_port_9000_are_peers_with_their_direction():
    table = "\n".join([
        "  sl  local_address rem_address   st tx_queue rx_queue",
        "   0: 0500000A:2328 0300000A:A1B2 01 00000000:00000000",   # 10.0.0.3 dialled us
        "   1: 0500000A:C350 0400000A:2328 01 00000000:00000000",   # we dialled 10.0.0.4
        "   2: 0500000A:C351 0600000A:2328 06 00000000:00000000",   # TIME_WAIT: gone
        "   3: 00000000:2328 00000000:0000 0A 00000000:00000000",   # the listener
        "   4: 0500000A:1F90 0700000A:1F91 01 00000000:00000000"])  # another port: not ours
    assert sockets.established(table) == {"10.0.0.3": False, "10.0.0.4": True}


def test_connections_report_what_changed(tmp_path):
    table = tmp_path / "tcp"
    watch = sockets.Connections({"10.0.0.3": "n1", "10.0.0.4": "n2"}, table)
    table.write_text("h\n 0: 0500000A:2328 0300000A:A1B2 01 x\n 1: 0500000A:C350 0400000A:2328 01 x\n")
    assert watch.changes() == ([("n1", False), ("n2", True)], [])
    table.write_text("h\n 1: 0500000A:C350 0400000A:2328 01 x\n")
    assert watch.changes() == ([], ["n1"])


def test_hosts_name_every_peer_node_and_index():
    config = {"node_id": "n3", "listen": {"host": "10.0.0.5", "port": 4001},
              "peers": {"n1": {"host": "10.0.0.3", "port": 4001}, "n12": {"host": "10.0.0.14", "port": 4001}}}
    assert hosts_file(config).splitlines()[1:] == ["10.0.0.5\tnode3", "10.0.0.3\tnode1", "10.0.0.14\tnode12"]


def test_a_registered_interop_binary_is_named_by_its_name_and_speaks_its_own_wire(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERLAB_ADAPTERS", str(tmp_path / "registered"))
    program = tmp_path / "node"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    with pytest.raises(KeyError, match="no binary is registered as 'mine'"):
        get_adapter("interop:mine")
    done = peerlab("contract", "register", "mine", str(program), env={**os.environ})
    assert done.returncode == 0 and "registered interop:mine" in done.stdout, done.stderr
    adapter = get_adapter("interop:mine")
    assert adapter.wire == "gossipsub-interop" and adapter.protocols == ("gossipsub",)
    assert adapter.missing() == []
    assert adapter.argv("c.json")[-4:] == ["--binary", str(program), "--config", "c.json"]
    listed = peerlab("contract", "implementations", env={**os.environ})
    assert "interop:mine installed  registered by you" in listed.stdout, listed.stdout
    program.unlink()
    assert get_adapter("interop:mine").missing() == [str(program)]


@pytest.mark.parametrize("named", ["interop:/usr/bin/id", "interop:../../../usr/bin/id", "interop:./node",
                                   "interop:", "interop:bin/id"])
def test_a_scenario_never_names_a_program_by_its_path(named, tmp_path):
    """Scenarios arrive in pull requests and CI runs them as root: a path would run any program."""
    with pytest.raises(KeyError, match="never a path"):
        get_adapter(named)
    text = (f"name: hostile\nnodes: {{count: 2}}\nprotocol: {{name: gossipsub, implementation: '{named}'}}\n"
            "workload: {publishers: 1, rate: 1/s, duration: 2s}\n")
    (tmp_path / "s.yaml").write_text(text)
    done = peerlab("validate", str(tmp_path / "s.yaml"))
    assert done.returncode == 2 and "never a path" in done.stderr and "implementation" in done.stderr, done.stderr


@pytest.mark.slow
def test_registering_refuses_what_is_not_a_program_or_a_name(tmp_path):
    for name, binary, why in [("mine", tmp_path / "absent", "not an executable file"),
                              ("go-libp2p", "/bin/true", "not one of peerlab"), ("../x", "/bin/true", "letters")]:
        done = peerlab("contract", "register", name, str(binary), "--dir", str(tmp_path))
        assert done.returncode == 2 and why in done.stderr, done.stderr


def test_interop_and_an_adapters_name_runs_that_adapters_program_in_the_interop_mode():
    go = get_adapter("interop:go-libp2p")
    assert go.argv("c.json")[-4] == "--binary" and go.argv("c.json")[-3].endswith(".tools/go-libp2p/go-libp2p-node")
    assert get_adapter("interop:js-libp2p").argv("c.json")[-3].endswith("node/adapters/js-libp2p/interop-node")
    assert interop_adapters() == ["go-libp2p", "js-libp2p", "rust-libp2p"]
    # py-libp2p always sends from and seqno, which that contract's wire refuses
    with pytest.raises(KeyError, match="py-libp2p adapter does not speak .* these do: go-libp2p, js-libp2p, rust"):
        get_adapter("interop:py-libp2p")


@pytest.mark.slow
def test_a_scenario_exports_as_one_params_json_that_follows_their_schema(tmp_path):
    out = tmp_path / "params.json"
    done = peerlab("contract", "interop-export", "scenarios/interop-subnet-blob-msg.yaml", "-o", str(out))
    assert done.returncode == 0, done.stderr
    params = json.loads(out.read_text())
    publishes = [i["instruction"] for i in params["script"] if i.get("instruction", {}).get("type") == "publish"]
    assert len(publishes) == 16 and {p["messageSizeBytes"] for p in publishes} == {98304}
    connects = [i for i in params["script"] if i.get("instruction", {}).get("type") == "connect"]
    assert sum(len(c["instruction"]["connectTo"]) for c in connects) >= 100 * 20 // 2
    # ended as their runner ends an experiment: after the last publish (T0 + 210 s: warm-up 30 s, then 16
    # publishes 12 s apart) every binary waits for the run's end (lead 15 s + 30 + 192 + drain 10 s), then exits
    waits = [i["elapsedSeconds"] for i in params["script"] if i["type"] == "waitUntil"]
    assert waits[-2:] == [15 + 210, 15 + 30 + 192 + 10] and params["script"][-1]["type"] == "waitUntil"
    checked = peerlab("contract", "interop-check", str(out))
    assert checked.returncode == 0 and "follows the gossipsub-interop instruction schema" in checked.stdout
    params["script"][0]["instruction"]["gossipSubParams"] = {"HeartbeatInterval": "1s"}
    out.write_text(json.dumps(params))
    checked = peerlab("contract", "interop-check", str(out))
    assert checked.returncode == 1 and checked.stdout.startswith("script/0/instruction/gossipSubParams/HeartbeatInterval")
    refused = peerlab("contract", "interop-export", "scenarios/quickstart.yaml")
    assert refused.returncode == 2 and "runs gossipsub, not floodsub" in refused.stderr


def test_a_delivery_of_zero_is_never_a_plain_success_line():
    from orchestrator.cli.common import summary

    metrics = {"delivery_ratio": 0.0, "messages": 2, "latency_ms": {"p50": None, "p99": None},
               "bytes": {"data_sent": 0, "control_sent": 0}}
    assert "does not measure the protocol" in summary(metrics)
    assert "does not measure" not in summary({**metrics, "delivery_ratio": 0.5})
