"""The scenario fuzz (orchestrator/cli/scenario_fuzz.py, `peerlab fuzz --decoder scenario`): the
hand-made hostile classes (scenario_fuzz_cases.py) are each refused, and mutated scenarios through
validate and plan end in exit 0 or a refusal naming its field, never a traceback, within 2 s each; and
what the fuzz found, each refused now with the field named."""
import random

import pytest

from orchestrator.cli.scenario_fuzz import SECONDS_PER_INPUT, problem
from orchestrator.cli.scenario_fuzz_cases import text_mutation
from orchestrator.model.scenario import ScenarioError, parse_scenario
from tests.support.cli import ROOT, peerlab

QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()


@pytest.mark.slow
def test_a_seeded_fuzz_of_150_scenarios_accepts_some_refuses_most_and_crashes_none():
    """Beside the 150 mutated scenarios, every hand-made class of scenario_fuzz_cases.py is refused (a
    FIFO, /dev/zero, a billion laughs, ...), none in more than 2 s. `peerlab fuzz --decoder scenario
    --frames 10000` is the long run (docs/faults.md)."""
    done = peerlab("fuzz", "--decoder", "scenario", "--frames", "150", "--seed", "11", timeout=600)
    line = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0 and " crashes=0 " in line, done.stdout + done.stderr[-3000:]
    fields = dict(part.split("=") for part in line.split())
    assert int(fields["accepted"]) > 0 and int(fields["refused"]) > 0, line  # both paths were exercised
    assert int(fields["accepted"]) + int(fields["refused"]) == 150
    assert int(fields["hand_made"]) >= 30 and float(fields["slowest"]) < SECONDS_PER_INPUT, line


def test_the_text_mutations_make_every_hostile_class(tmp_path):
    """Keys twice, anchors, matrices, escapes, huge numbers, deep nesting, tiny churn sessions and store
    credentials each come out of the fuzz's text mutations, and each is refused naming its field."""
    from orchestrator.model.matrix import expand

    rng, said = random.Random(4), []
    for _ in range(150):
        (tmp_path / "s.yaml").write_text(text_mutation(QUICKSTART, rng))
        try:
            expand(tmp_path / "s.yaml")
        except ScenarioError as err:
            said.append(str(err))
    for marker in ("given twice", "combinations; at most", "values once its aliases are expanded", "\\x1b",
                   "a whole number of", "nested more than", "nesting depth", "churn.session.mean",
                   "a store URL holds no credentials", "name: String should match"):
        assert any(marker in s for s in said), marker


@pytest.mark.parametrize("code, output, wrong", [
    (0, "ok: s.yaml", None),
    (2, "scenario 's': invalid scenario\n  workload.rate: must be > 0", None),
    (1, "", "exit code 1"),
    (2, "Traceback (most recent call last):\n  ...", "a traceback in the output"),
    (2, "", "refused without a word"),
    (2, "scenario 's': invalid scenario\n  something went wrong", "a problem line that names no field"),
    (2, "s.yaml: invalid scenario\n  \x1b[31m: unknown field", "a control character in the output"),
    (0, "ok: s.yaml [\x07]", "a control character in the output"),
    (2, "s.yaml: invalid scenario\n" + "  x: unknown field\n" * 40, "a refusal of 41 lines"),
    (2, "s.yaml: invalid scenario\n  name: " + "x" * 10_000, "a refusal line of 10,008 characters"),
])
def test_what_counts_as_a_crash(code, output, wrong):
    assert problem(code, output) == wrong


@pytest.mark.parametrize("override, field", [
    ("network.bandwidth_up=.inf", "network.bandwidth_up"),         # was OverflowError
    ("workload.message_size=1e999KiB", "workload.message_size"),    # was OverflowError
    ("workload.duration=.nan", "workload.duration"),
    ("workload.rate=918031", "workload"),                           # 18 million publishes: planning hung
    ("faults=[{at: 1, action: partition, groups: []}]", "faults"),  # was TypeError in planning
    ("topics.subscriptions={model: zipf, alpha: 500, size: 2}", "topics.subscriptions"),  # was OverflowError
    ("name=%s%n", "--set"),                                         # was a YAML ScannerError
    ("workload.warmup=1e308", "workload.warmup"),                   # churn's sessions walked it forever
])
def test_what_the_fuzz_found_is_refused_naming_the_field(override, field):
    from orchestrator.model.plan import make_plan

    with pytest.raises(ScenarioError) as err:
        make_plan(parse_scenario(QUICKSTART, overrides=[override]))
    assert field in str(err.value), str(err.value)


def test_a_steep_zipf_still_plans_promptly():
    """alpha 20 over 10 topics, 5 each: the fifth topic's weight is 1e-14 of the first's, so redrawing
    until five distinct ones came up never ended (the fuzz's hang)."""
    from orchestrator.model.plan import make_plan

    plan = make_plan(parse_scenario(QUICKSTART, overrides=["topics.count=10", "topics.subscriptions={model: zipf, alpha: 20, size: 5}"]))
    assert all(len(n.subscriptions) == 5 for n in plan.nodes)


def test_a_matrix_value_that_is_not_yaml_is_refused():
    done = peerlab("validate", "scenarios/quickstart.yaml", "--matrix", "name=%s%n,b", timeout=60)
    assert done.returncode == 2 and "--matrix" in done.stderr and "Traceback" not in done.stderr, done.stderr
