"""The runner's fidelity verdict reaches metrics.json and the top of report.html."""
import json

import pytest

from analysis.job import analyse
from tests.support.fidelity import section
from tests.support.runs import write_run

pytestmark = pytest.mark.spark


def _with_fidelity(run_dir, fidelity):
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    if fidelity is not None:
        manifest["fidelity"] = fidelity
    path.write_text(json.dumps(manifest))


def test_an_unfaithful_verdict_heads_the_report(tmp_path, spark):
    write_run(tmp_path)
    _with_fidelity(tmp_path, section(lag_p99_ms=42.0))
    m = analyse(tmp_path, spark)
    assert m["fidelity"]["verdict"] == "unfaithful"
    assert m["fidelity"]["phases"] == {"before T0": "unfaithful", "load": "unfaithful", "drain": "unfaithful"}
    assert json.loads((tmp_path / "analysis" / "metrics.json").read_text())["fidelity"]["verdict"] == "unfaithful"
    html = (tmp_path / "analysis" / "report.html").read_text()
    top = html[:html.index("<h2>Summary</h2>")]  # above the summary
    assert "Fidelity: UNFAITHFUL" in top and "load: node event loops late: 10.0% of 300 ticks over 20 ms" in top
    assert "loop lag p99 ms: worst node" in top and "Rule: a phase is unfaithful" in top


def test_a_run_without_the_watch_says_not_measured(tmp_path, spark):
    write_run(tmp_path)
    m = analyse(tmp_path, spark)
    assert "fidelity" not in m
    assert "Fidelity: not measured" in (tmp_path / "analysis" / "report.html").read_text()
