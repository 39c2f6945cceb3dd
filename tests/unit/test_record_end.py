"""How a run's record ends when the storing of its logs is cut off: by a signal between two logs, or
by a full disk (the end-to-end disk-full run is tests/emulation/test_disk_full.py)."""
from __future__ import annotations

import errno
import json
import threading
from pathlib import Path

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.record.run_record import RESERVE, RunRecord


def record_with_logs(tmp_path: Path, n: int = 3) -> tuple[RunRecord, Path, dict[str, Path]]:
    sc = parse_scenario(f"name: rec\nnodes: {{count: {n}}}\noutput: {{store: 'file://{tmp_path}/runs'}}\n")
    rec = RunRecord(sc, make_plan(sc), backend="local")
    rec.begin()
    scratch = tmp_path / "scratch"
    (scratch / "events").mkdir(parents=True)
    logs = {}
    for i in range(n):
        logs[f"n{i}"] = scratch / "events" / f"n{i}.jsonl"
        logs[f"n{i}"].write_text('{"type": "start", "node": "n%d"}\n' % i)
    return rec, scratch, logs


def test_a_signal_while_storing_stops_between_two_logs_and_keeps_the_rest(tmp_path):
    rec, scratch, logs = record_with_logs(tmp_path)
    stop = threading.Event()
    put = rec.store.put_log

    def put_then_signal(*args):  # the signal arrives while the first log is being stored
        put(*args)
        stop.set()

    rec.store.put_log = put_then_signal
    problem = rec.end("completed", "", logs, scratch, stop)
    assert problem.startswith("interrupted by a signal while storing the event logs: 1 of 3")
    status = json.loads((rec.run_dir / "status").read_text())
    manifest = json.loads((rec.run_dir / "manifest.json").read_text())
    assert status["status"] == manifest["status"] == "interrupted" and manifest["logs_collected"] == 1
    assert [p.name for p in (rec.run_dir / "events").iterdir()] == ["n0.jsonl.gz"]
    assert sorted(p.name for p in (scratch / "events").iterdir()) == ["n0.jsonl", "n1.jsonl", "n2.jsonl"]
    assert str(scratch) in status["detail"] and not (rec.run_dir / RESERVE).exists()


def test_a_full_disk_fails_the_run_and_the_reserve_pays_for_its_ending(tmp_path):
    rec, scratch, logs = record_with_logs(tmp_path)
    reserve = rec.run_dir / RESERVE
    assert reserve.stat().st_size >= (rec.run_dir / "manifest.json").stat().st_size + 256 * 1024
    calls = []

    def full(*args):
        calls.append(args)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        rec.store.__class__.put_log(rec.store, *args)

    rec.store.put_log = full
    problem = rec.end("completed", "", logs, scratch)
    assert problem.startswith(f"disk full while storing the event log of n1 in {rec.run_dir}: 1 of 3")
    assert json.loads((rec.run_dir / "status").read_text())["status"] == "failed"
    assert len(calls) == 2 and (scratch / "events" / "n2.jsonl").exists()  # stopped; nothing removed


def test_all_stored_removes_the_scratch_and_the_reserve(tmp_path):
    rec, scratch, logs = record_with_logs(tmp_path)
    assert rec.end("completed", "", logs, scratch) == ""
    assert not scratch.exists() and not (rec.run_dir / RESERVE).exists()
    assert json.loads((rec.run_dir / "manifest.json").read_text())["logs_collected"] == 3
