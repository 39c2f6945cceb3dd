"""`peerlab bench analysis --events N`: the core metrics of N synthetic events, timed with Spark (the
path every report takes, local or on a cluster through --master) and with DuckDB on the same machine.

Both engines read the same Parquet tables (written by analysis.synthetic) and must agree on every
figure; a disagreement is an error. Times are wall-clock from reading the tables to having the
metrics, each engine's start-up (JVM, session) excluded and printed apart. The last line is
`spark_s=<s> duckdb_s=<s> ratio=<spark/duckdb>`.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset
from rich.console import Console

from analysis import synthetic


def _flat(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def disagreements(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-9) -> list[str]:
    """Figures on which two engines' metrics differ (floating point sums may differ in the last bits)."""
    fa, fb = _flat(a), _flat(b)
    bad = []
    for key in sorted(set(fa) | set(fb)):
        x, y = fa.get(key), fb.get(key)
        if x is None or y is None:
            if x is not y:
                bad.append(f"{key}: {x} != {y}")
        elif not math.isclose(float(x), float(y), rel_tol=rel, abs_tol=1e-9):
            bad.append(f"{key}: {x} != {y}")
    return bad


def bench_analysis(events: int, master: str, workdir: str | None, keep: bool, console: Console) -> int:
    import duckdb

    from analysis.duck import core_metrics as duck_metrics
    from analysis.ingest import read_events
    from analysis.metrics import core_metrics
    from analysis.spark import get_spark, local_frame, size_for

    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="peerlab-bench-analysis-"))
    tables = base / "events"
    shape = synthetic.Shape()
    try:
        console.print(f"generating {events:,} events ({shape.nodes} nodes, {shape.topics} topics, "
                      f"~{synthetic.events_per_message(shape):.0f} events per message) under {tables}")
        t = time.perf_counter()
        subs = synthetic.generate(tables, events, shape)
        size = sum(p.stat().st_size for p in tables.rglob("*.parquet"))
        rows = pyarrow.dataset.dataset(tables, format="parquet", partitioning="hive").count_rows()
        console.print(f"  {rows:,} events in {time.perf_counter() - t:.1f} s, {size / 1e6:.0f} MB of Parquet")

        console.print("duckdb: computing the core metrics")
        t = time.perf_counter()
        con = duckdb.connect()
        duck_start = time.perf_counter() - t
        t = time.perf_counter()
        duck = duck_metrics(con, tables, subs, shape.nodes)
        duck_s = time.perf_counter() - t
        con.close()

        console.print(f"spark ({master}): starting the session")
        t = time.perf_counter()
        spark = get_spark(master, input_bytes=size)
        size_for(spark, size)  # partitions and adaptive execution as a report of this size gets them
        spark_start = time.perf_counter() - t
        console.print(f"spark ({master}): computing the core metrics")
        t = time.perf_counter()
        frame = read_events(spark, tables)
        subs_frame = local_frame(spark, subs, "node string, topic string")
        sparkm = core_metrics(frame, subs_frame, shape.nodes)
        spark_s = time.perf_counter() - t

        bad = disagreements(sparkm, duck)
        lat = sparkm["latency_ms"]
        console.print(f"messages={sparkm['messages']} delivery_ratio={sparkm['delivery_ratio']:.6f} "
                      f"p50_ms={lat['p50']:.3f} p99_ms={lat['p99']:.3f} "
                      f"L100_ms={sparkm['coverage_latency_ms']['L100']:.3f} "
                      f"dup_per_node={sparkm['duplicates_per_node']:.1f}")
        console.print(f"start-up (not in the ratio): spark_session_s={spark_start:.2f} duckdb_connect_s={duck_start:.3f}")
        if bad:
            console.print("[bold red]engines disagree:[/] " + "; ".join(bad))
            return 1
        console.print("engines agree on every figure", style="green")
        print(f"spark_s={spark_s:.3f} duckdb_s={duck_s:.3f} ratio={spark_s / duck_s:.2f}", flush=True)
        return 0
    finally:
        if not keep:
            shutil.rmtree(base if not workdir else tables, ignore_errors=True)
