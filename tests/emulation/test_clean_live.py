"""`peerlab clean` never touches a live run: a local run whose orchestrator lives (its state file), and a
docker run whose state file is not here but whose objects name a live orchestrator on this host or one on
another host sharing the engine, are left alone; objects of an orchestrator that died on this host are
removed, and --force removes the others."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.backends.docker import LABEL, OWNER
from tests.emulation.test_local_backend import wait_for_line
from tests.support.cli import ROOT, peerlab, run_netns

pytestmark = [pytest.mark.emulation, pytest.mark.slow, pytest.mark.exclusive]


def test_a_live_local_run_is_left_alone(tmp_path: Path):
    scenario = tmp_path / "live.yaml"
    scenario.write_text(f"name: live\nnodes: {{count: 3}}\nworkload: {{duration: 8s}}\ncalibration: {{enabled: false}}\n"
                        f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--no-report"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "T0:", 120)
        run_dir = next((tmp_path / "runs").iterdir())
        before = run_netns(run_dir)
        result = peerlab("clean")
        assert result.returncode == 0 and "still running; left alone" in result.stderr, result.stderr
        assert run_netns(run_dir) == before and len(before) == 4  # 3 nodes + the switch
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]  # the run went on to the end


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
