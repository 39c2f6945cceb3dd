"""`--dilate auto` (orchestrator/run/auto_dilation.py): the first k from the CPU model at the faithful
share of the cores, when peerlab chooses k at all, which verdicts send a run round again, and how far."""
from __future__ import annotations

import re

import pytest

from orchestrator.model import dilation as dilation_rules
from orchestrator.model.scenario import parse_scenario
from orchestrator.run import admission, auto_dilation
from orchestrator.run.admission import AdmissionError, Machine, admit, estimate
from tests.support.cli import ROOT, peerlab

MACHINE = Machine(memory_mib=22 * 1024, cpus=2, fds=1024 * 1024, disk_mib=60 * 1024)
PUBLISHERS = (ROOT / "scenarios" / "gossipsub-publishers.yaml").read_text()
QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()


def publishers(*extra: str):
    return parse_scenario(PUBLISHERS, overrides=["matrix={}", "workload.publishers=30", *extra])


def test_the_first_k_is_the_least_that_keeps_the_work_within_the_faithful_share_of_the_cores():
    """gossipsub-publishers at 30 publishers: the refusal's "fits" (all the cores) gave --dilate 5 and
    unfaithful runs; auto starts where the work is within FAITHFUL_CPU_SHARE of the cores."""
    choice = auto_dilation.first_choice(publishers(), "local", MACHINE)
    share = admission.FAITHFUL_CPU_SHARE * MACHINE.cpus
    k = choice.k
    assert k % dilation_rules.STEP == 0
    assert (estimate(publishers(f"dilation={k}")).cpu_cores <= share
            < estimate(publishers(f"dilation={k - dilation_rules.STEP}")).cpu_cores)
    assert k > estimate(publishers()).dilation_for(MACHINE.cpus)  # more than what merely fits
    assert "cores' worth" in choice.why and f"{admission.FAITHFUL_CPU_SHARE:.0%}" in choice.why
    # and the refusal of the undilated run names both: what fits, and what a faithful run needs
    with pytest.raises(AdmissionError) as refused:
        admit(publishers("dilation=1"), "local", machine=MACHINE)
    assert f"a faithful run needs about --dilate {k:g}," in str(refused.value)
    assert re.search(r"--dilate [\d.]+ or more fits", str(refused.value))


def test_peerlab_chooses_k_when_asked_or_when_nothing_but_the_cpu_stops_an_undilated_run_being_faithful():
    assert auto_dilation.wanted(publishers(), "local", None, MACHINE)            # refused on CPU alone
    assert not auto_dilation.wanted(publishers(), "local", "1", MACHINE)         # --dilate given
    assert not auto_dilation.wanted(publishers("dilation=1"), "local", None, MACHINE)  # set in the scenario
    assert auto_dilation.wanted(publishers("dilation=1"), "local", "auto", MACHINE)
    assert not auto_dilation.wanted(publishers(), "kubernetes", None, MACHINE)   # no CPU model there
    quick = parse_scenario(QUICKSTART)
    assert not auto_dilation.wanted(quick, "local", None, MACHINE)               # fits
    # fits all the cores but is past the faithful share (the warning's band): peerlab chooses too
    band = parse_scenario(QUICKSTART, overrides=["nodes.count=60", "workload.rate=16/s"])
    assert not admission.problems(estimate(band), MACHINE) and admission.warnings(estimate(band), MACHINE)
    assert auto_dilation.wanted(band, "local", None, MACHINE)
    assert auto_dilation.first_choice(band, "local", MACHINE).k > 1
    assert not auto_dilation.wanted(band, "local", "1", MACHINE)
    huge = parse_scenario(QUICKSTART, overrides=["nodes.count=5000"])            # memory too: refused
    assert admission.problems(estimate(huge), MACHINE)[0].startswith("memory:")
    assert not auto_dilation.wanted(huge, "local", None, MACHINE)
    assert auto_dilation.first_choice(quick, "local", MACHINE).k == 1
    assert auto_dilation.first_choice(publishers(), "sim", MACHINE).k == 1
    js = parse_scenario(QUICKSTART, overrides=["protocol.name=gossipsub", "protocol.implementation=js-libp2p"])
    assert auto_dilation.first_choice(js, "local", MACHINE) == auto_dilation.Choice(
        1.0, "its implementations cannot be dilated (docs/dilation.md)")


def _manifest(verdict: str, load: dict, faults: list | None = None, exits: list | None = None) -> dict:
    return {"run_id": "r1", "dilation": {"factor": 2.0}, "faults_executed": faults or [], "node_exits": exits or [],
            "fidelity": {"verdict": verdict, "phases": {"load": load, "drain": {}}}}


LATE_LOOPS = {"loop_lag": {"nodes": 10, "late_share": 0.2, "samples": 1000, "p99_ms_worst": 300.0,
                           "worst_node": "n3"}}


def test_only_reasons_the_cpu_explains_send_a_run_round_again():
    assert auto_dilation.cpu_reasons(_manifest("faithful", LATE_LOOPS)) == []
    late = auto_dilation.cpu_reasons(_manifest("unfaithful", LATE_LOOPS))
    assert len(late) == 1 and late[0].startswith("load: node event loops late: 20.0% of 1000 ticks")
    # a node that exited on its own makes the run unfaithful, and no k would change it
    exited = _manifest("unfaithful", {"loop_lag": {"nodes": 10, "late_share": 0.0, "samples": 1000}},
                       exits=[{"node": "n1", "at_s": 3.0}])
    assert auto_dilation.cpu_reasons(exited) == []
    fault_late = _manifest("unfaithful", {}, faults=[{"action": "kill", "node": "n2", "at": 3.0, "offset_s": 5.5,
                                                            "t_ns": 9, "issued_ns": 9}])
    assert auto_dilation.cpu_reasons(fault_late) and "kill" in auto_dilation.cpu_reasons(fault_late)[0]
    summary = auto_dilation.attempt(_manifest("unfaithful", LATE_LOOPS))
    assert summary == {"dilation": 2.0, "run_id": "r1", "verdict": "unfaithful", "cpu_reasons": late}


def test_each_attempt_grows_k_by_half_up_to_the_limit():
    assert [auto_dilation.next_k(k) for k in (1, 1.5, 2, 6, 67, 99, 100)] == [1.5, 2.5, 3, 9, 100, 100, None]
    assert auto_dilation.ATTEMPTS == 3


def test_k_is_advised_in_half_steps_so_a_run_just_past_the_share_is_not_made_twice_as_long():
    """topiary-topics was 0.83 cores' worth against a faithful share of 0.8 and got k 2 (a whole k),
    while k 1 ran faithful: a half step gives 1.5."""
    assert [dilation_rules.step_up(k) for k in (0.3, 1.0, 1.0375, 1.5, 1.5000001, 11.265)] == [1, 1, 1.5, 1.5, 2, 11.5]
    share = admission.FAITHFUL_CPU_SHARE * MACHINE.cpus
    need = admission.Estimate(nodes=60, memory_mib=800, cpu_cores=share * 1.04, fds=400, disk_mib=10)
    assert need.dilation_for(share) == 1.5


@pytest.mark.slow
def test_dilate_takes_a_factor_or_auto_and_says_which_when_it_is_neither():
    bad = peerlab("run", "scenarios/quickstart.yaml", "--dilate", "lots", timeout=60)
    assert bad.returncode == 2 and "--dilate 'lots': give a factor (1 or more, e.g. --dilate 4) or auto" in bad.stderr
    inside = peerlab("run", "scenarios/quickstart.yaml", "--dilate", "auto", "--backend", "kubernetes",
                     "--in-cluster", timeout=60)
    assert inside.returncode == 2 and "--dilate auto runs again at a larger K from this machine" in inside.stderr


@pytest.mark.slow
def test_plan_shows_the_run_at_the_k_peerlab_run_would_choose():
    """`peerlab plan` of a scenario that does not fit undilated plans it as `peerlab run` would run it
    (the issue: plan said "--dilate 5 or more fits", and --dilate 6 gave unfaithful runs)."""
    k = auto_dilation.first_choice(publishers(), "local").k
    done = peerlab("plan", "scenarios/gossipsub-publishers.yaml", "--set", "workload.publishers=30", timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"dilated x{k:g}: {14 * k:g}s of real time" in done.stdout
    assert f"dilation x{k:g}: what `peerlab run` chooses for it (--dilate auto: " in done.stdout
    fits = peerlab("plan", "scenarios/quickstart.yaml", timeout=120)
    assert fits.returncode == 0 and "dilation x" not in fits.stdout and "dilated" not in fits.stdout


def test_a_run_whose_own_processes_need_the_cores_is_told_that_no_k_would_do():
    need = admission.Estimate(nodes=10, memory_mib=100, cpu_cores=3.0, fds=100, disk_mib=1, fixed_cores=2.5)
    assert need.dilation_for(MACHINE.cpus) == float("inf")
    [cpu] = [p for p in admission.problems(need, MACHINE) if p.startswith("CPU:")]
    assert "the run's own processes need 2.50 cores, which no --dilate reduces" in cpu and "inf" not in cpu
