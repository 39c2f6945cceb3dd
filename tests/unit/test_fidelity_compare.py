"""`peerlab compare` flags a comparison that includes an unfaithful run: a column, a warning line
under the table, in the HTML, and on the console."""
from pathlib import Path

import pytest

from analysis.compare import load_rows, render_html, render_table
from tests.support.cli import peerlab
from tests.support.fidelity import section
from tests.support.runs import compared_run

METRICS = {"nodes": 2, "messages": 4, "delivery_ratio": 1.0, "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
           "coverage_latency_ms": {"L50": 1.0, "L100": 2.0}, "duplicates_per_node": 0.5,
           "bytes": {"data_sent": 2e6, "control_sent": 1e5}, "shaping": {"mode": "transport"}}


def fake_run(root: Path, name: str, fidelity: dict | None) -> Path:
    return compared_run(root, name, METRICS, **({"fidelity": fidelity} if fidelity else {}))


@pytest.mark.slow
def test_an_unfaithful_run_is_flagged(tmp_path):
    runs = [fake_run(tmp_path, "good", section(3.0)), fake_run(tmp_path, "bad", section(40.0)),
            fake_run(tmp_path, "old", None)]
    rows = load_rows(runs)
    assert [r["fidelity"] for r in rows] == ["faithful", "unfaithful", None]
    table = render_table(rows)
    assert table.splitlines()[-1].startswith("warning: run bad is UNFAITHFUL")
    assert "run good" not in table
    assert "warning: run bad is UNFAITHFUL" in render_html(rows, {})
    done = peerlab("compare", *map(str, runs))
    assert done.returncode == 0, done.stderr
    assert "warning: run bad is UNFAITHFUL" in done.stderr and "warning: run bad" in done.stdout


def test_faithful_runs_are_not_flagged(tmp_path):
    rows = load_rows([fake_run(tmp_path, "a", section(3.0)), fake_run(tmp_path, "b", section(2.0))])
    assert "warning" not in render_table(rows) and "warning" not in render_html(rows, {}).split("</style>")[1]
