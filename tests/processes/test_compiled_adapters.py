"""The go-libp2p and rust-libp2p adapters' programs themselves (node/adapters/go-libp2p, rust-libp2p), run
directly on a contract config: a parameter the implementation cannot take, or a peer id that is not the
seed's, stops the node before it starts (exit 2, naming what is wrong); a node with a good config logs
`start` and `ready` as the contract says, and SIGTERM stops it with `stop` and exit 0."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from node import contract
from node.adapters import get_adapter
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
