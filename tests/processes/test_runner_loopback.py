"""The runner's own logic without root: real node processes on 127.0.0.1 through the loopback test
backend (tests/support/loopback_backend.py). Deploy, calibration, T0, the fault timeline (a kill and
restart of a real process, a partition and a degrade asked of the shaping layer), collection and
teardown, checked from the run directory a user gets."""
import gzip
import json
import subprocess
import sys

import pytest

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.record import host_state
from orchestrator.run.runner import Runner
from tests.support.loopback_backend import LoopbackBackend
from tests.support.scenarios import FLOODSUB_SIX, scenario_text

SCENARIO = scenario_text("loopback", 3, FLOODSUB_SIX, """\
workload: {publishers: 2, rate: 8/s, warmup: 0.5s, duration: 4s, drain: 1.5s, message_size: 256B}
faults:
  - {at: 1.5s, action: kill, nodes: [n5], restart_after: 1s}
  - {at: 2s, action: partition, groups: [[n0, n1, n2], [n3, n4, n5]], duration: 0.5s}
  - {at: 3s, action: degrade, nodes: [n2], delay: 30ms, bandwidth: 5mbit, duration: 1s}
calibration: {pairs: 3, throughput_nodes: 2, throughput_rounds: 1}
""")


def _events(run_dir, node):
    with gzip.open(run_dir / "events" / f"{node}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


class StoredBeforeTeardown(LoopbackBackend):
    """Notes which event logs the run directory held when teardown began."""

    stored: list[str] = []

    def teardown(self) -> None:
        StoredBeforeTeardown.stored = sorted(p.name for p in (self.ctx.run_dir / "events").glob("*.jsonl.gz"))
        super().teardown()


@pytest.mark.slow
def test_a_run_with_faults_on_real_processes_needs_no_root(tmp_path, monkeypatch):
    monkeypatch.setattr(host_state, "STATE_DIR", tmp_path / "state")  # /run/peerlab is root's
    scenario = parse_scenario(SCENARIO + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    runner = Runner(scenario, make_plan(scenario), backend=StoredBeforeTeardown, shaping_mode="transport")
    run_dir = runner.run()
    # each node's log was stored as it stopped, before teardown: a run killed then keeps them
    assert StoredBeforeTeardown.stored == sorted(f"n{i}.jsonl.gz" for i in range(6))

    assert json.loads((run_dir / "status").read_text())["status"] == "completed"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "loopback" and manifest["shaping"]["mode"] == "transport"
    # a restart is recorded when its process is up (it runs beside the later faults)
    assert sorted(f["action"] for f in manifest["faults_executed"]) == sorted(
        ["kill", "partition", "restart", "heal", "degrade", "restore"])
    assert manifest["faults_executed"][0]["action"] == "kill"

    # what the shaping layer was asked: a tree per node at deploy, the cut and the heal, n2's rates
    kinds = [op.op for _, op in runner.backend.ops]
    assert kinds.count("egress") == 6 and kinds.count("download") == 6
    assert "cut" in kinds and "heal" in kinds and kinds.count("rate") == 4  # degrade and restore, both ends
    # the partition's filters made at deploy; the cut and the heal are then a class on each link cut
    cut_ops = [op for _, op in runner.backend.ops if op.op in ("prepare_cut", "cut")]
    assert [op.op for op in cut_ops] == ["prepare_cut"] * (len(cut_ops) // 2) + ["cut"] * (len(cut_ops) // 2)
    assert kinds.count("heal") == kinds.count("cut") > 0

    # the killed node really died and came back: two processes, one event log
    n5 = [e["type"] for e in _events(run_dir, "n5")]
    assert n5.count("start") == 2 and n5.count("t0") == 2
    # every message published before the kill reached every other subscriber
    logs = {n["id"]: _events(run_dir, n["id"]) for n in manifest["plan"]["nodes"]}
    # (before the kill as executed, less 0.3 s for a message to reach everyone: on a loaded
    # machine a publish planned before the kill may come just before it)
    kill_ns = next(f["t_ns"] for f in manifest["faults_executed"] if f["action"] == "kill") - int(0.3e9)
    early = {e["msg_id"]: e["node"] for evs in logs.values() for e in evs
             if e["type"] == "publish_message" and e["ts"] < kill_ns}
    assert len(early) >= 4
    for node, evs in logs.items():
        got = {e["msg_id"] for e in evs if e["type"] == "deliver_message"}
        assert {m for m, origin in early.items() if origin != node} <= got, node
    # nothing left running
    assert not any(runner.backend.alive(n["id"]) for n in manifest["plan"]["nodes"])


SLOW_RESTART = scenario_text("slowrestart", 3, FLOODSUB_SIX, """\
workload: {publishers: 2, rate: 8/s, warmup: 0.5s, duration: 5s, drain: 1s, message_size: 256B}
faults:
  - {at: 1s, action: kill, nodes: [n5], restart_after: 0.5s}
  - {at: 2s, action: partition, groups: [[n0, n1, n2], [n3, n4, n5]], duration: 1s}
calibration: {pairs: 1, throughput_nodes: 1, throughput_rounds: 1}
""")


class SlowRestarts(LoopbackBackend):
    """A node's second process answers only 4 s after it was started (as a py-libp2p node's did on a
    loaded host, or a pod's exec through a busy API server)."""

    def start_node(self, node_id, config):
        if node_id not in self.procs:
            return super().start_node(node_id, config)
        path = self._path("configs", node_id)
        path.write_text(config.model_dump_json())
        with open(self._path("out", node_id), "ab") as out:
            self.procs[node_id] = subprocess.Popen(
                ["sh", "-c", 'sleep 4; exec "$0" -m node --config "$1"', sys.executable, str(path)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.exclusive  # its faults' timing: in the foreground, one at a time, as the partition tests
@pytest.mark.slow  # (12 s: `make test` runs it, test-fast does not)
def test_a_partition_keeps_its_time_while_a_restart_is_slow(tmp_path, monkeypatch):
    """A partition changes the far ends of the links, which a restart leaves alone: it does not wait
    for a restart in flight (it did, and came as late as the restart was slow)."""
    monkeypatch.setattr(host_state, "STATE_DIR", tmp_path / "state")
    scenario = parse_scenario(SLOW_RESTART + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    run_dir = Runner(scenario, make_plan(scenario), backend=SlowRestarts, shaping_mode="transport").run()
    executed = {f["action"]: f for f in json.loads((run_dir / "manifest.json").read_text())["faults_executed"]}
    restart, cut, heal = executed["restart"], executed["partition"], executed["heal"]
    assert restart["offset_s"] > 5.0  # the restart was slow: up 4 s after its 1.5 s
    # the partition and heal kept their times (their own work here is a recorded operation);
    # before, the partition waited until the restart was done, after its heal's time
    assert cut["offset_s"] - 2.0 < 1.0 and heal["offset_s"] - 3.0 < 1.0, (cut, heal)
    assert cut["t_ns"] < restart["t_ns"] and heal["t_ns"] < restart["t_ns"]


@pytest.mark.slow
def test_admission_stops_a_run_that_does_not_fit_unless_forced(tmp_path, monkeypatch):
    """On a machine too small for it (memory for 3 of its 6 nodes), the runner refuses before planning
    and no run directory appears; with force it runs, and the manifest records the estimate and the force."""
    from orchestrator.run import admission

    monkeypatch.setattr(host_state, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(admission, "CHECKED_BACKENDS", ("loopback",))
    local = admission.costs()["backends"]["local"]  # the loopback backend's nodes are local processes
    monkeypatch.setattr(admission, "costs", lambda: {"backends": {"loopback": local}})
    scenario = parse_scenario(SCENARIO + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    need = admission.estimate(scenario, "loopback")
    free = (need.scaled(3).memory_mib + need.scaled(4).memory_mib) / 2 / admission.HEADROOM
    monkeypatch.setattr(admission.Machine, "here", classmethod(lambda cls: cls(free, 2, 4096, 10_000.0)))
    try:
        Runner(scenario, make_plan(scenario), backend=LoopbackBackend)
        raise AssertionError("admitted")
    except admission.AdmissionError as err:
        assert f"memory: {need.memory_mib:.0f} MiB needed, {free:.0f} MiB available" in str(err), err
        assert "At most 3 nodes" in str(err)
    assert not (tmp_path / "runs").exists()
    # forced, it runs: the same nodes, a shorter run (what it does is the test above)
    short = parse_scenario(SCENARIO.split("faults:")[0].replace("duration: 4s", "duration: 1s") +
                           f"calibration: {{enabled: false}}\noutput: {{store: 'file://{tmp_path}/runs'}}\n")
    run_dir = Runner(short, make_plan(short), backend=LoopbackBackend, force=True, shaping_mode="transport").run()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["admission"]["forced"] is True and manifest["admission"]["estimate"]["nodes"] == 6


def test_the_shared_scratch_folder_is_left_open_to_every_user(tmp_path, monkeypatch):
    """<tmp>/peerlab holds every user's run scratch: made (or found, from an older peerlab) 0755 by
    its owner, it is opened up to 1777 like /tmp, so that a run as root does not lock out a later
    run as an unprivileged user (the kubernetes backend needs no root)."""
    import stat

    monkeypatch.setattr(host_state.tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / "peerlab").mkdir(mode=0o755)
    root = host_state.scratch_root()
    assert root == tmp_path / "peerlab"
    assert stat.S_IMODE(root.stat().st_mode) == 0o1777
