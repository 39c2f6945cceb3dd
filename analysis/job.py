"""The analysis job for one run: tables (Parquet), metrics.json and report.html under analysis/."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from analysis import faults, kernel_traffic, metrics, relaying, traffic, views  # noqa: F401 - they register their metrics and tables
from analysis.extras import EXTRAS, RunFrames
from analysis.ingest import load_manifest
from analysis.registry import TABLES, compute_metrics
from analysis.report import bandwidth_plot, by_message, coverage_plot, latency_cdf_plot, render
from analysis.run_data import RunData
from analysis.spark import get_spark

PLOT_SAMPLE = 2_000_000  # deliveries brought to the driver for plotting


def compute(spark: SparkSession, run_dir: Path, write_tables: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """metrics.json (every registered metric, then the protocol's extra section), the Parquet tables,
    and the report's plots."""
    run = RunData(spark, run_dir)
    result = {"run_id": run.manifest["run_id"], "nodes": run.nodes, **compute_metrics(run)}
    extra = EXTRAS.get(run.plan["protocol"])
    extra_tables, extra_plots = {}, {}
    if extra:
        result["protocol"], extra_tables, extra_plots = extra.compute(
            RunFrames(run.events, run.publishes, run.deliveries, run.messages, run.manifest, run.all_publishes,
                      run.all_deliveries))
    if write_tables:
        _write_tables(run, extra_tables)
    sample = run.deliveries.select("msg_id", "latency_ms").limit(PLOT_SAMPLE).toPandas()
    upload = (run.per_second.groupBy("second").agg(F.sum("data").alias("data"), F.sum("control").alias("control"))
              .orderBy("second").toPandas())
    plots = {"latency CDF": latency_cdf_plot({"": sample["latency_ms"].dropna().to_numpy()}),
             "coverage over time": coverage_plot({"": by_message(sample)}),
             "bandwidth over time": bandwidth_plot(upload, run.nodes, run.publishing, run.t0),
             **extra_plots}
    run.release()
    return result, plots


def _write_tables(run: RunData, extra_tables: dict[str, Any]) -> None:
    """Every registered table, partitioned by run (and the events by node too), so that the tables of
    many runs read as one data set."""
    run_col = F.lit(run.manifest["run_id"]).alias("run")
    tables = run.run_dir / "analysis" / "tables"
    run.events.select(run_col, "*").write.mode("overwrite").partitionBy("run", "node").parquet(str(tables / "events"))
    frames = {name: fn(run) for name, fn in TABLES.items()}
    for name, frame in {**frames, **extra_tables}.items():
        if frame is not None:
            frame.select(run_col, "*").write.mode("overwrite").partitionBy("run").parquet(str(tables / name))


def analyse(run_dir: str | Path, spark: SparkSession | None = None) -> dict[str, Any]:
    """Analyse a run directory; writes analysis/metrics.json and analysis/report.html; returns metrics."""
    run_dir = Path(run_dir)
    spark = spark or get_spark()
    result, plots = compute(spark, run_dir)
    out = run_dir / "analysis"
    out.mkdir(exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
    (out / "report.html").write_text(render(result, load_manifest(run_dir), plots))
    return result


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)
