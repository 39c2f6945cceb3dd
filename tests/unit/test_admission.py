"""Admission (orchestrator/run/admission.py): a run that does not fit the machine is refused before
anything is planned or created, with the figures and the largest node count that fits; --force runs
it and the manifest says so; backends whose nodes do not run here are not checked."""
from __future__ import annotations

import os
import time

import pytest

from orchestrator.model.scenario import parse_scenario
from orchestrator.run import admission
from orchestrator.run.admission import AdmissionError, Machine, admit, estimate, largest_fit, problems
from tests.support.cli import ROOT, peerlab

BUILD_MACHINE = Machine(memory_mib=22 * 1024, cpus=2, fds=1024 * 1024, disk_mib=60 * 1024)
QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()


def scenario(count: int, *extra: str):
    return parse_scenario(QUICKSTART, overrides=[f"nodes.count={count}", *extra])


def test_5000_local_nodes_are_refused_with_the_figures_and_the_largest_count_that_fits():
    with pytest.raises(AdmissionError) as err:
        admit(scenario(5000), "local", machine=BUILD_MACHINE)
    text = str(err.value)
    assert "5000 nodes do not fit" in text and "memory: 54.3 GiB needed, 22.0 GiB available" in text
    assert "CPU: 20.0 cores' worth" in text and "--force" in text
    fit = largest_fit(estimate(scenario(5000)), BUILD_MACHINE)
    assert f"At most {fit} nodes" in text and f"--set nodes.count={fit}" in text
    assert not problems(estimate(scenario(fit)), BUILD_MACHINE)       # that many fit
    assert problems(estimate(scenario(fit + 1)), BUILD_MACHINE)       # one more does not


def test_small_runs_fit_and_the_record_says_what_was_estimated():
    record = admit(scenario(30), "local", machine=BUILD_MACHINE)
    assert record["checked"] and record["problems"] == [] and not record["forced"]
    assert record["estimate"]["nodes"] == 30 and 0.3 < record["estimate"]["memory_mib"] / 1024 < 0.5


def test_force_runs_anyway_and_says_so():
    record = admit(scenario(5000), "docker", force=True, machine=BUILD_MACHINE)
    assert record["forced"] and len(record["problems"]) == 2


def test_adapter_nodes_cost_what_was_measured_for_them():
    js = estimate(scenario(100, "protocol.name=gossipsub", "protocol.implementation=js-libp2p"))
    own = estimate(scenario(100, "protocol.name=gossipsub"))
    assert js.memory_mib > 10 * (own.memory_mib - admission.ORCHESTRATOR_MIB)
    assert js.cpu_cores == pytest.approx(100 * admission.NODE_CPU_SHARE["js-libp2p"])


@pytest.mark.parametrize("backend", ["kubernetes", "sim"])
def test_backends_whose_nodes_do_not_run_here_are_not_checked(backend):
    assert admit(scenario(5000), backend, machine=BUILD_MACHINE)["checked"] is False


def _cli_run(count: int, *options: str):
    """`peerlab run` of `count` quickstart nodes into an S3 store nobody listens for (refused at once,
    connection refused): a run admitted here fails on its store before it creates anything, so this
    test can never start one, whatever the machine."""
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_REGION": "us-east-1"}
    started = time.monotonic()
    done = peerlab("run", "scenarios/quickstart.yaml", "--set", f"nodes.count={count}",
                   "--set", "output.store=s3://nobody-listens/runs", "--no-report", *options, timeout=120, env=env)
    return done, time.monotonic() - started


def test_the_cli_refuses_before_planning_and_creates_nothing_and_force_lets_it_through():
    """`peerlab run` of 5000 local nodes (or more, on a machine they fit): refused (exit 3) with the
    figures, without planning (which takes about 33 s for 5000 nodes) and without a run directory;
    with --force the same command passes admission and stops at the store (exit 1)."""
    count = max(5000, largest_fit(estimate(scenario(5000)), Machine.here()) + 1)
    done, took = _cli_run(count)
    print(f"{count} nodes refused in {took:.1f} s")
    assert done.returncode == 3, done.stderr
    assert f"{count} nodes do not fit" in done.stderr and "At most" in done.stderr and "Traceback" not in done.stderr
    assert took < 20
    forced, _ = _cli_run(count, "--force")
    assert forced.returncode == 1 and "nobody-listens" in forced.stderr, forced.stderr
    assert "do not fit" not in forced.stderr and "Traceback" not in forced.stderr
    plan = peerlab("plan", "scenarios/quickstart.yaml", timeout=120)
    assert plan.returncode == 0 and "on this machine (local/docker backends): needs" in plan.stdout
