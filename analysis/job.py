"""The analysis job for one run: tables (Parquet), metrics.json, report.html and timings.json under
analysis/.

The entry point of analysis/: it imports analysis/catalogue.py (which registers the metrics and the
tables), the data hub (run_data.py), the extras and the report, and is imported by nothing of
analysis/ but the CLI's and the tools' callers in orchestrator/."""
from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from rich.console import Console

from analysis import catalogue  # noqa: F401 - registers every metric and table, in metrics.json's order
from analysis.extras import EXTRAS, RunFrames
from analysis.ingest import RemoteRun, load_manifest, logs_bytes, refresh_events_table
from analysis.progress import AnalysisProgress
from analysis.registry import METRICS, TABLES, compute_metrics
from analysis.report import bandwidth_plot, by_message, coverage_plot, latency_cdf_plot, render
from analysis.run_data import RunData
from analysis.spark import driver_peak_memory, start_session

PLOT_SAMPLE = 2_000_000  # deliveries brought to the driver for plotting
METRIC_WORKERS = 2  # metrics computed side by side (analysis/registry.py)


def compute(spark: SparkSession, run_dir: Path, write_tables: bool = True,
            progress: AnalysisProgress | None = None, refreshed: dict[str, Any] | None = None,
            remote: RemoteRun | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """metrics.json (every registered metric, then the protocol's extra section), the Parquet tables,
    and the report's plots. `refreshed`: what converting the logs found, when that is done already;
    `remote`: the logs and tables are in an object store, read and written through s3a."""
    progress = progress or AnalysisProgress()
    run = RunData(spark, run_dir, refreshed, remote)
    progress.step("ingest")
    run.read()
    progress.note(f"{sum(r['events'] for r in run.per_node):,} events, {run.partitions} partition(s), "
                  + ("logs converted into" if run.ingest["converted"] else "read from") + " analysis/tables/events")
    progress.step("metrics")
    result = {"run_id": run.manifest["run_id"], "nodes": run.nodes,
              **compute_metrics(run, lambda name, seconds: progress.done("metrics", name, seconds), METRIC_WORKERS)}
    extra = EXTRAS.get(run.plan["protocol"])
    extra_tables, extra_plots = {}, {}
    if extra:
        progress.step("protocol", run.plan["protocol"])
        result["protocol"], extra_tables, extra_plots = extra.compute(
            RunFrames(run.events, run.publishes, run.deliveries, run.messages, run.manifest, run.all_publishes,
                      run.all_deliveries, run.per_node))
    if write_tables:
        _write_tables(run, extra_tables, progress)
    progress.step("plots")
    sample = run.deliveries.select("msg_id", "latency_ms").limit(PLOT_SAMPLE).toPandas()
    upload = pd.DataFrame(run.upload, columns=["second", "bytes", "data", "control", "peak"])
    plots = {"latency CDF": latency_cdf_plot({"": sample["latency_ms"].dropna().to_numpy()}),
             "coverage over time": coverage_plot({"": by_message(sample)}),
             "bandwidth over time": bandwidth_plot(upload, run.nodes, run.publishing, run.t0),
             **extra_plots}
    run.release()
    return result, plots


def steps(protocol: str) -> int:
    """How many steps `analyse` reports (session, ingest, metrics, protocol, tables, plots, report):
    the progress bar's length."""
    return 5 + len(METRICS) + (1 if protocol in EXTRAS else 0)


def _write_tables(run: RunData, extra_tables: dict[str, Any], progress: AnalysisProgress) -> None:
    """Every registered table beside the events table (written at ingest), partitioned by run, so
    that the tables of many runs read as one data set. Two at a time: a small table's write is
    mostly Spark's fixed cost per job, one core's worth."""
    run_col = F.lit(run.manifest["run_id"]).alias("run")
    frames = {name: frame for name, frame in {**{name: fn(run) for name, fn in TABLES.items()}, **extra_tables}.items()
              if frame is not None}
    progress.step("tables", f"{len(frames)} tables")

    def write(name: str) -> None:
        frames[name].select(run_col, "*").write.mode("overwrite").partitionBy("run").parquet(f"{run.tables}/{name}")
    with ThreadPoolExecutor(2, thread_name_prefix="analysis-tables") as pool:
        list(pool.map(write, frames))


def analyse(run_dir: str | Path, spark: SparkSession | None = None, console: Console | None = None,
            master: str = "local[*]", conf: dict[str, str] | None = None,
            after_session: Callable[[], None] | None = None,
            session: Future[SparkSession] | None = None, remote: RemoteRun | None = None,
            where: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Analyse a run directory; writes analysis/metrics.json, analysis/report.html and
    analysis/timings.json (each stage's and step's wall time); returns the metrics. Without `spark`,
    starts a session on `master` with `conf`, sized for the run. `console`: where progress goes (a
    bar on a terminal, a line per stage otherwise; None: nowhere). `after_session`: called once the
    session is there. `session`: one already starting (`analysis.spark.start_session`, which the CLI
    calls before importing this module, so that the JVM boots while Python loads the analysis); without
    it and `spark`, one is started here. Either way the logs are converted while the JVM boots.
    `remote`: the logs stay in an object store and Spark reads them there (run_dir holds the manifest);
    the session must have the s3a settings (analysis/s3a.py). `where`: what says where the session's
    executors ran (pods and their cluster nodes), asked before the session ends, kept in timings.json."""
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    progress = AnalysisProgress(console, steps(manifest["plan"]["protocol"]))
    refreshed = None
    try:
        if spark is None:
            progress.step("session", master)
            session = session or start_session(master, conf, remote.logs_bytes if remote else logs_bytes(run_dir))
            if remote is None:
                refreshed = refresh_events_table(run_dir, manifest)
                if refreshed["converted"]:
                    progress.note("and the logs converted meanwhile")
            spark = session.result()
        if after_session is not None:
            after_session()
        result, plots = compute(spark, run_dir, progress=progress, refreshed=refreshed, remote=remote)
        try:  # where it ran and what the driver held are said when they can be: nothing fails for them
            executors = where() if where is not None else None
        except Exception:  # noqa: BLE001
            executors = None
        try:
            driver = driver_peak_memory(spark)
        except Exception:  # noqa: BLE001
            driver = {}
        progress.step("report")
        out = run_dir / "analysis"
        out.mkdir(exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(result, indent=1, default=_json_default) + "\n")
        (out / "report.html").write_text(render(result, manifest, plots))
    finally:
        timings = progress.close()
    ran = {"master": spark.sparkContext.master, "driver": driver, **({"executors": executors} if executors else {})}
    (out / "timings.json").write_text(json.dumps({"stages": timings, "steps": progress.steps, **ran}, indent=1) + "\n")
    return result


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)
