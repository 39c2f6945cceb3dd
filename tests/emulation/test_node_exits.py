"""A node that crashes on its own (SIGKILLed from outside the fault timeline) is never a silent success:
recorded, named in the verdict, the run failed; `nodes.exits: allow` keeps the record but not the failure;
the timeline's own kill is not counted."""
from pathlib import Path

import pytest

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from tests.support.crash import CrashOne, assert_named
from tests.support.scenarios import SMALL

pytestmark = [pytest.mark.emulation, pytest.mark.slow]


@pytest.mark.parametrize("exits", ["fail", "allow"])
def test_a_crashed_node_is_recorded_and_fails_the_run_unless_allowed(tmp_path: Path, exits):
    text = SMALL.replace("nodes: {count: 8}", f"nodes: {{count: 8, exits: {exits}}}")
    assert f"exits: {exits}" in text
    scenario = parse_scenario(text + f"output: {{store: 'file://{tmp_path}'}}\n")
    runner = CrashOne(scenario, make_plan(scenario))
    run_dir = runner.run()
    assert_named(runner, allowed=exits == "allow")
    assert (run_dir / "exits" / "n3.txt").exists()
