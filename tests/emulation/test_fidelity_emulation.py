"""The fidelity verdict of real runs: the quickstart, shortened, is faithful on a quiet machine, and
the same run beside a CPU hog (busy loops, two per core, for the run's length) is not, for a CPU or
loop-lag reason. Whole machine: anything else on it is load the verdict rightly counts, the tests
that `make test` runs beside the exclusive ones at nice 19 too (CPU pressure counts a task that waits,
whatever its priority: beside them PSI some stays near 100%)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.slow, pytest.mark.exclusive, pytest.mark.whole_machine]

SHORT = ["--set", "workload.duration=8s", "--no-report"]


def _run(tmp_path: Path) -> tuple[dict, str]:
    done = peerlab("run", "scenarios/quickstart.yaml", *SHORT, "--set", f"output.store=file://{tmp_path}/runs",
                   timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((Path(done.stdout.strip().splitlines()[-1]) / "manifest.json").read_text())
    return manifest["fidelity"], done.stderr.strip().splitlines()[-1]


def test_the_quickstart_is_faithful(tmp_path):
    fidelity, last = _run(tmp_path)
    assert fidelity["verdict"] == "faithful", fidelity["reasons"]
    assert last == "fidelity: faithful"
    load = fidelity["phases"]["load"]
    assert load["host"]["samples"] >= 8 and load["loop_lag"]["nodes"] == 30 and load["probes"]["count"] >= 4
    assert fidelity["phases"]["before T0"]["probes"]["count"] == 8  # calibration's
    assert fidelity["sampling"]["probe_pings"] > 0


def test_beside_a_cpu_hog_it_is_not(tmp_path):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * os.cpu_count())]
    try:
        fidelity, last = _run(tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert fidelity["verdict"] == "unfaithful"
    assert last.startswith("fidelity: UNFAITHFUL: load: ")
    cpu_or_lag = ("node event loops late", "CPU pressure", "run queue above")
    assert any(r.startswith("load: " + why) for r in fidelity["reasons"] for why in cpu_or_lag), fidelity["reasons"]


def test_dilate_auto_runs_again_while_the_cpu_falls_behind_and_keeps_every_attempt(tmp_path):
    """`--dilate auto` beside the same hog: the quickstart (10 nodes) fits, so peerlab starts at k=1;
    each run judged unfaithful on CPU grounds is run again at 1.5 times its k (in half steps: 1.5, 2.5),
    3 runs at most, each
    kept in the store and named in the next one's manifest; the last says it is still unfaithful."""
    store = tmp_path / "runs"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * os.cpu_count())]
    try:
        done = peerlab("run", "scenarios/quickstart.yaml", "--dilate", "auto", "--no-report",
                       "--set", "nodes.count=10", "--set", "workload.warmup=1s", "--set", "workload.duration=4s",
                       "--set", "workload.drain=2s", "--set", f"output.store=file://{store}", timeout=900)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dilation: --dilate 1, chosen by peerlab" in done.stderr
    assert "running it again at --dilate 1.5;" in done.stderr and "running it again at --dilate 2.5;" in done.stderr
    assert "still unfaithful on CPU grounds at --dilate 2.5 after 3 runs" in done.stderr
    last = Path(done.stdout.strip().splitlines()[-1])
    assert len(done.stdout.strip().splitlines()) == 1  # one run directory: the last attempt's
    manifest = json.loads((last / "manifest.json").read_text())
    auto = manifest["dilation"]["auto"]
    assert manifest["dilation"]["factor"] == 2.5 and auto["attempt"] == 3 and auto["first"] == 1
    assert [a["dilation"] for a in auto["earlier"]] == [1, 1.5]
    for earlier in auto["earlier"]:
        kept = json.loads((store / earlier["run_id"] / "manifest.json").read_text())
        assert kept["status"] == "completed" and kept["fidelity"]["verdict"] == "unfaithful"
        assert earlier["cpu_reasons"] and all(r.startswith(("load: ", "drain: ")) for r in earlier["cpu_reasons"])
    assert manifest["fidelity"]["verdict"] == "unfaithful"
    assert sorted(p.name for p in store.iterdir() if p.is_dir()) == sorted(
        [last.name, *(a["run_id"] for a in auto["earlier"])])
