"""The logs' conversion into the events table holds a few logs and a row group at a time, not the run:
the 1000-node Topiary simulation of 109 M events, converted as one Arrow table, took 22 GB of the
machine's 24 before it was stopped. Measured in a process of its own (Arrow's memory pool keeps the
process's peak)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).with_name("runs") / "ci-smoke"
COPIES = 60  # 8 logs x 60: 480 logs, about 380,000 events

CONVERT = """
import json, sys
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from analysis import ingest
ingest.ROW_GROUP_ROWS = 20_000
run = Path(sys.argv[1])
manifest = json.loads((run / "manifest.json").read_text())
found = ingest.convert_logs(run, manifest, run / "table", files=4)
peak = pa.default_memory_pool().max_memory()
files = sorted((run / "table").rglob("*.parquet"))
groups = [pq.ParquetFile(f).num_row_groups for f in files]
written = [str(f.relative_to(run / "table")) for f in files]
whole = pq.read_table(run / "table" / f"run={manifest['run_id']}").nbytes
print(json.dumps({"events": found["events"], "files": found["files"], "groups": groups, "written": written, "peak": peak, "whole": whole}))
"""


def test_a_large_runs_logs_convert_in_memory_bounded_by_a_row_group(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("expected-metrics.json", "analysis"))
    logs = sorted((run / "events").glob("*.jsonl.gz"))
    for i in range(1, COPIES):
        for log in logs:
            shutil.copy(log, run / "events" / f"{log.name.split('.')[0]}c{i}.jsonl.gz")
    out = subprocess.run([sys.executable, "-c", CONVERT, str(run)], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout)
    assert found["events"] == 6372 * COPIES
    # the four files asked for, each of several row groups; the conversion's peak a fraction of the
    # table it made (held whole, as before, the peak was more than the table)
    assert found["peak"] < found["whole"] / 3, found
    assert len(found["files"]) == 4 and all(g >= 2 for g in found["groups"]), found
    assert found["files"] == found["written"], found  # the stamp names exactly the files there
