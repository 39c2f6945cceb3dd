"""`peerlab clean` never touches a live run: a local run whose orchestrator lives (it holds its lease), also
when the `clean` comes from a shell with another PEERLAB_STATE_DIR or XDG_RUNTIME_DIR (root's runs have
one state directory), and a docker run whose lease is not here but whose objects name a live
orchestrator on this host or one on another host sharing the engine, are left alone; objects of an
orchestrator that died on this host are removed, and --force removes the others. A live run's node
configs (they hold its control token) are the run's node user's alone."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from node.process import privileges
from orchestrator.backends.docker import LABEL, OWNER
from tests.emulation.test_local_backend import wait_for_line
from tests.support.cli import ROOT, peerlab, run_netns, short_id
from tests.support.scenarios import FLOODSUB_SIX, scenario_text

pytestmark = [pytest.mark.emulation, pytest.mark.slow, pytest.mark.exclusive]


def test_a_live_local_run_is_left_alone(tmp_path: Path):
    scenario = tmp_path / "live.yaml"
    scenario.write_text(f"name: live\nnodes: {{count: 3}}\nworkload: {{duration: 4s}}\ncalibration: {{enabled: false}}\n"
                        f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--no-report"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    beside_a_clean(proc, tmp_path, lambda run_dir: peerlab("clean"), "still running; left alone", 120)


def beside_a_clean(proc: subprocess.Popen, tmp_path: Path, clean, said: str, timeout: float, look=None) -> Path:
    """Once the run is at T0 (`look(run_dir)` then), `clean(run_dir)` says `said` and leaves the run's
    namespaces, and the run goes on to its end (exit 0). Returns the run directory."""
    try:
        wait_for_line(proc, "T0:", 120)
        run_dir = next((tmp_path / "runs").iterdir())
        if look:
            look(run_dir)
        before = run_netns(run_dir)
        result = clean(run_dir)
        out = " ".join(result.stderr.split())
        assert result.returncode == 0 and said.format(run=run_dir.name, pid=proc.pid) in out, out
        assert run_netns(run_dir) == before and len(before) == 4  # 3 nodes + the switch
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]  # the run went on to the end, untouched
    return run_dir


def test_a_clean_from_another_state_directory_leaves_a_live_run_alone_and_its_secrets_are_private(tmp_path: Path):
    scenario = tmp_path / "live.yaml"
    scenario.write_text(scenario_text("other-dir", 3, FLOODSUB_SIX.replace("count: 6", "count: 3"),
                                      "workload: {publishers: 3, rate: 6/s, warmup: 1s, duration: 6s, drain: 2s}",
                                      "calibration: {enabled: false}", f"output: {{store: 'file://{tmp_path}/runs'}}"))
    mine = {**os.environ, "PEERLAB_STATE_DIR": str(tmp_path / "state-a")}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--no-report"],
                            cwd=ROOT, env=mine, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def secrets_are_private(run_dir: Path) -> None:
        """The configs hold the run's control token: the node user's own (each node runs as it), in folders
        others may pass through but not list."""
        scratch = Path("/tmp/peerlab") / short_id(run_dir)
        configs = sorted((scratch / "configs").glob("*.json"))
        modes = {p.name: p.stat().st_mode & 0o777 for p in [scratch, scratch / "configs", *configs]}
        assert len(configs) == 3 and modes == {scratch.name: 0o711, "configs": 0o711,
                                               **{p.name: 0o600 for p in configs}}, modes
        uid = privileges.run_user(short_id(run_dir))[0]
        assert {p.stat().st_uid for p in configs} == {uid} and uid != 0

    theirs = {**os.environ, "PEERLAB_STATE_DIR": str(tmp_path / "state-b"), "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}
    run_dir = beside_a_clean(proc, tmp_path, lambda run_dir: peerlab("clean", env=theirs),
                             "run {run}: orchestrator pid {pid} holds its lease: still running; left alone", 240,
                             secrets_are_private)
    assert json.loads((run_dir / "status").read_text())["status"] == "completed"
    # the links the clean left alone carried the run: every message reached both other nodes
    events = [json.loads(line) for path in (run_dir / "events").glob("*.jsonl.gz") for line in gzip.open(path, "rt")]
    published = {e["msg_id"]: e["node"] for e in events if e["type"] == "publish_message"}
    delivered = {(e["msg_id"], e["node"]) for e in events if e["type"] == "deliver_message"}
    expected = {(m, n) for m, by in published.items() for n in ("n0", "n1", "n2") if n != by}
    assert len(published) >= 30 and delivered == expected, (len(published), sorted(expected - delivered))


@pytest.mark.docker
def test_docker_objects_of_a_live_orchestrator_are_left_alone_and_a_dead_ones_removed(docker_engine):
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    owners = {"00c1ea": f"{here}/{dead.pid}",       # died on this host: an orphan
              "00c1eb": f"{here}/{os.getpid()}",  # this test's process: alive
              "00c1ec": "another-host/4242"}          # on another host sharing the engine
    volumes = [docker_engine.volumes.create(f"pl{short}-events", labels={LABEL: short, OWNER: owner})
               for short, owner in owners.items()]
    try:
        result = peerlab("clean")
        assert result.returncode == 0, result.stderr
        out = " ".join(result.stderr.split())
        assert "run 00c1ea: removed 0 containers, 0 networks, 1 volumes" in out
        assert f"run 00c1eb: Docker objects of orchestrator {owners['00c1eb']} (alive on this host); left alone" in out
        assert "run 00c1ec: Docker objects of orchestrator another-host/4242 (on another host" in out
        left = {v.name for v in docker_engine.volumes.list(filters={"label": LABEL})}
        assert {"pl00c1eb-events", "pl00c1ec-events"} <= left and "pl00c1ea-events" not in left
        forced = peerlab("clean", "--force")
        assert forced.returncode == 0, forced.stderr
        left = {v.name for v in docker_engine.volumes.list(filters={"label": LABEL})}
        assert not left & {"pl00c1eb-events", "pl00c1ec-events"}
    finally:
        for v in volumes:
            try:
                v.remove(force=True)
            except Exception:  # noqa: BLE001 - removed by the test already
                pass
