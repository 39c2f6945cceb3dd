"""Scenario matrices (`matrix:` block and --matrix) and the comparison table's protocol columns."""
from pathlib import Path

import pytest

from analysis.compare import load_rows, render_csv, render_table
from orchestrator.model.matrix import expand
from orchestrator.model.scenario import ScenarioError
from tests.support.cli import peerlab
from tests.support.runs import compared_run

SC = """name: m
nodes: {count: 6}
protocol: {name: gossipsub, params: {D: 4, D_lo: 3, D_hi: 6}}
matrix:
  gossipsub.variant: [v1.1, all-3]
"""


def test_matrix_block_and_option_give_the_cartesian_product(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SC)
    combos = expand(path, ["nodes.count=8"], ["workload.message_size=200KB,1MB"])
    assert [c.label for c in combos] == ["variant=v1.1 workload.message_size=200KB", "variant=v1.1 workload.message_size=1MB",
                                         "variant=all-3 workload.message_size=200KB", "variant=all-3 workload.message_size=1MB"]
    assert [(c.scenario.protocol.params.variant, c.scenario.workload.message_size) for c in combos] == [
        ("v1.1", 200_000), ("v1.1", 1_000_000), ("all-3", 200_000), ("all-3", 1_000_000)]
    assert all(c.scenario.nodes.count == 8 and c.scenario.matrix == {} for c in combos)
    assert combos[0].scenario.protocol.params.D == 4  # the file's params survive the override


def test_a_bad_value_names_its_combination_and_field(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SC)
    with pytest.raises(ScenarioError) as err:
        expand(path, [], ["gossipsub.variant=v1.2,v9"])
    text = str(err.value)
    assert "[variant=v9]" in text and "protocol.params.variant" in text


def test_matrix_syntax_errors_say_how_to_write_it(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SC)
    with pytest.raises(ScenarioError, match="dotted.path=value1,value2"):
        expand(path, [], ["gossipsub.variant"])
    path.write_text(SC.replace("[v1.1, all-3]", "v1.1"))
    with pytest.raises(ScenarioError, match="matrix: expected"):
        expand(path, [])


@pytest.mark.slow
def test_cli_validate_lists_every_combination_and_plan_refuses_many(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SC)
    ok = peerlab("validate", str(path))
    assert ok.returncode == 0 and ok.stdout.count("ok:") == 2 and "[variant=all-3]" in ok.stdout
    plan = peerlab("plan", str(path))
    assert plan.returncode == 2 and "2 combinations" in plan.stderr and "--set gossipsub.variant=v1.1" in plan.stderr
    pinned = peerlab("plan", str(path), "--set", "protocol.params.variant=all-3")  # --set pins a matrix path
    assert pinned.returncode == 0, pinned.stderr


def fake_run(root: Path, name: str, protocol: str, label: str, extra: dict | None) -> Path:
    metrics = {"nodes": 2, "messages": 4, "delivery_ratio": 1.0,
               "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
               "coverage_latency_ms": {"L50": 1.0, "L100": 2.0}, "duplicates_per_node": 0.5,
               "bytes": {"data_sent": 2e6, "control_sent": 1e5}, "shaping": {"mode": "transport"},
               **({"protocol": extra} if extra else {})}
    return compared_run(root, name, metrics, protocol=protocol, label=label)


def test_compare_adds_the_protocols_columns_and_na_for_others(tmp_path):
    gs = {"coverage_latency_ms": {"L50": 10.0, "L100": 20.0, "deviation": {"L100": 3.0}},
          "control": {"ihave": 5, "iwant": 2, "idontwant": 7}, "idontwant_saves": {"count": 4},
          "stagger_saves": {"count": 1}, "duplicates": {"count": 9}}
    a = fake_run(tmp_path, "a", "gossipsub", "variant=all-3", gs)
    b = fake_run(tmp_path, "b", "floodsub", "", None)
    rows = load_rows([a, b])
    assert rows[0]["label"] == "variant=all-3" and rows[0]["L100_ms_measured"] == 20.0
    assert rows[0]["idontwant_saves"] == 4 and rows[1]["idontwant_saves"] is None
    table = render_table(rows)
    assert "stagger_saves" in table and "n/a" in table
    assert render_csv(rows).splitlines()[0].endswith("duplicates")
