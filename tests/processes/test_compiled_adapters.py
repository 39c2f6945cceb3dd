"""The go-libp2p and rust-libp2p adapters' programs themselves (node/adapters/go-libp2p, rust-libp2p), run
directly on a contract config: a parameter the implementation cannot take, or a peer id that is not the
seed's, stops the node before it starts (exit 2, naming what is wrong); a node with a good config logs
`start` and `ready` as the contract says, and SIGTERM stops it with `stop` and exit 0. Their second mode
(and js-libp2p's), gossipsub-interop's contract (`--params params.json`, host name node<ID>), in a UTS and network namespace
of its own; and each program's own unit tests (`go test`, `cargo test`)."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from node import contract
from node.adapters import get_adapter, interop_adapters
from node.interop.shim import interop_peer_id
from orchestrator.builds import cargobuild, gobuild
from orchestrator.builds.adapter_programs import ADAPTERS
from tests.support.adapters import require_adapters
from tests.support.cli import patient

COMPILED = ["go-libp2p", "rust-libp2p"]


def config(tmp_path: Path, name: str, **changes) -> Path:
    seed = contract.identity_seed(1, "n0")
    cfg = contract.ContractConfig(
        run_id="direct", node_id="n0", protocol="gossipsub", implementation=name, seed=1, identity_seed=seed,
        listen={"host": "127.0.0.1", "port": 0}, subscriptions=["t0"], t0_ns=time.time_ns() + int(60e9),
        event_log=str(tmp_path / "n0.jsonl"), peer_ids={"n0": contract.peer_id(seed)}, resources_interval=0)
    path = tmp_path / "config.json"
    path.write_text(cfg.model_copy(update=changes).model_dump_json())
    return path


def start(name: str, path: Path) -> subprocess.Popen:
    return subprocess.Popen(get_adapter(name).argv(str(path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("name", COMPILED)
def test_a_parameter_it_cannot_take_is_refused_by_the_program(name, tmp_path):
    require_adapters(name)
    proc = start(name, config(tmp_path, name, params={"stagger_parallel": 2}))
    _, err = proc.communicate(timeout=patient(30))
    assert proc.returncode == 2 and "stagger_parallel" in err, err
    assert "heartbeat_interval" in err  # and it says what it takes
    assert not (tmp_path / "n0.jsonl").exists() or "ready" not in (tmp_path / "n0.jsonl").read_text()


@pytest.mark.parametrize("name", COMPILED)
def test_a_peer_id_that_is_not_the_seeds_is_refused(name, tmp_path):
    require_adapters(name)
    other = contract.peer_id(contract.identity_seed(1, "n1"))
    proc = start(name, config(tmp_path, name, peer_ids={"n0": other}))
    _, err = proc.communicate(timeout=patient(30))
    assert proc.returncode == 2 and other in err, err


@pytest.mark.parametrize("name", COMPILED)
def test_sigterm_stops_a_started_node_with_stop_and_exit_0(name, tmp_path):
    require_adapters(name)
    proc = start(name, config(tmp_path, name))
    log = tmp_path / "n0.jsonl"
    try:
        deadline = time.monotonic() + patient(30)
        while '"ready"' not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=patient(30))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert proc.returncode == 0
    assert events[0]["type"] == "start" and "ready" in [e["type"] for e in events]
    assert events[-1]["type"] == "stop" and events[-1]["reason"] == "SIGTERM"
    # (a lone node has no connect event; the runs in tests/emulation check whole logs against the contract)


def interop(name: str, tmp_path: Path, script: list, host: str = "node3") -> subprocess.Popen:
    """The program in gossipsub-interop's mode as that contract runs it: host name `host`, in a UTS and
    network namespace of its own (port 9000 free, its loopback up)."""
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"script": script}))
    program = get_adapter(name).interop_program()
    return subprocess.Popen(["unshare", "--uts", "--net", "sh", "-c",
                             f'hostname {host} && ip link set lo up && exec "$0" --params "$1"', program, str(params)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("name", interop_adapters())
def test_in_the_interop_mode_a_host_name_off_the_contract_or_a_field_go_has_not_is_refused(name, tmp_path):
    require_adapters(name)
    proc = interop(name, tmp_path, [], host="runner")
    _, err = proc.communicate(timeout=patient(30))
    assert proc.returncode == 2 and "node<ID>" in err, err
    proc = interop(name, tmp_path, [{"type": "initGossipSub", "gossipSubParams": {"Degree": 8}}])
    _, err = proc.communicate(timeout=patient(30))
    assert proc.returncode == 2 and "no field Degree" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("name", interop_adapters())
def test_in_the_interop_mode_the_node_names_its_peer_id_runs_the_script_and_stops_on_sigterm(name, tmp_path):
    require_adapters(name)
    script = [{"type": "initGossipSub", "gossipSubParams": {"D": 6, "HeartbeatInterval": 500_000_000}},
              {"type": "subscribeToTopic", "topicID": "t0"},
              {"type": "waitUntil", "elapsedSeconds": 1},
              {"type": "ifNodeIDEquals", "nodeID": 3, "instruction": {"type": "publish", "messageID": 77,
                                                                      "messageSizeBytes": 100, "topicID": "t0"}}]
    proc = interop(name, tmp_path, script)
    try:
        first = json.loads(proc.stdout.readline())
        time.sleep(1.5)  # past its waitUntil: a publish with no peer must not stop it
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=patient(30))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert first["msg"] == "PeerID" and first["id"] == interop_peer_id(3) and first["time"].startswith("20")
    assert proc.returncode in (0, -signal.SIGTERM), err


def test_the_go_adapters_own_go_tests_pass():
    done = gobuild.test(ADAPTERS / "go-libp2p", static=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rust_adapters_own_cargo_tests_pass():
    done = cargobuild.test(ADAPTERS / "rust-libp2p")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test result: ok" in done.stdout and " 0 passed" not in done.stdout
