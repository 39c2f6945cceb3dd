"""The event logs into the events table: a broken line costs that line, named, not the run; a log
cut short keeps every complete line; clock offsets applied once."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from analysis.ingest import read_log
from analysis.job import analyse

pytestmark = pytest.mark.spark

RUN = Path(__file__).with_name("runs") / "ci-smoke"


def _lines(path: Path) -> list[bytes]:
    return gzip.decompress(path.read_bytes()).splitlines(keepends=True)


def test_broken_lines_cost_only_themselves_and_are_named(tmp_path, spark):
    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("expected-metrics.json"))
    expected = json.loads((RUN / "expected-metrics.json").read_text())
    logs = run / "events"
    # n1: a line that is not JSON and one whose ts is a string, in the middle of the log
    n1 = _lines(logs / "n1.jsonl.gz")
    secret = b"root:*:20228:0:99999:7:::"
    n1[5:5] = [secret + b"\n", b'{"ts": "soon", "node": "n1", "type": "stop"}\n']
    (logs / "n1.jsonl.gz").write_bytes(gzip.compress(b"".join(n1)))
    # n2: the compressed stream ends in the middle of its last line (a crash, a full disk)
    whole = b"".join(_lines(logs / "n2.jsonl.gz"))
    cut = gzip.compress(whole + b'{"ts": 1, "node": "n2", "ty')
    (logs / "n2.jsonl.gz").write_bytes(cut[: len(cut) - 12])
    kept, problems = read_log(logs / "n2.jsonl.gz")
    assert problems and problems[-1]["problem"].startswith("cut short")
    assert kept.num_rows >= len(whole.splitlines()) - 1  # every line before the cut, but what deflate held back

    m = analyse(run, spark)
    dropped = m["ingest"]["lines"]
    assert {(d["log"], d["line"]) for d in dropped} >= {("n1.jsonl.gz", 6), ("n1.jsonl.gz", 7)}
    assert {d["problem"] for d in dropped if d["log"] == "n1.jsonl.gz"} == {"not a JSON object", "a field of the wrong type"}
    assert any(d["log"] == "n2.jsonl.gz" and d["problem"].startswith("cut short") for d in dropped)
    assert m["ingest"]["dropped_lines"] == len(dropped)
    assert m["events"] == expected["events"] - (len(whole.splitlines()) - kept.num_rows)
    assert m["messages"] == expected["messages"] and m["delivery_ratio"] > 0.8
    report = (run / "analysis" / "report.html").read_text()
    assert "log lines left out" in report and "n1.jsonl.gz line 6" in report
    assert "root:" not in report and "root:" not in (run / "analysis" / "metrics.json").read_text()


def test_a_run_stopped_before_collecting_every_log_is_reported_as_partial(tmp_path, spark):
    """A run killed mid-collection: the logs collected so far are analysed, and the report says
    whose are missing."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("expected-metrics.json", "n6.*", "n7.*"))
    m = analyse(run, spark)
    assert m["ingest"] == {"logs_missing": ["n6", "n7"]}
    assert m["nodes"] == 8 and m["events"] < json.loads((RUN / "expected-metrics.json").read_text())["events"]
    assert 0 < m["delivery_ratio"] < 1  # n6 and n7 are still expected receivers: nothing from them
    assert "partial: no log from" in (run / "analysis" / "report.html").read_text()
