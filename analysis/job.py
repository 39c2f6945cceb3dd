"""The analysis job for one run: tables (Parquet), metrics.json and report.html under analysis/."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from analysis import faults
from analysis import metrics as M
from analysis import traffic as Tr
from analysis import views as V
from analysis.extras import EXTRAS, RunFrames
from analysis.ingest import load_manifest, read_events, subscriptions_frame
from analysis.report import bandwidth_plot, by_message, coverage_plot, latency_cdf_plot, render
from analysis.spark import get_spark

PLOT_SAMPLE = 2_000_000  # deliveries brought to the driver for plotting


def compute(spark: SparkSession, run_dir: Path, write_tables: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    manifest = load_manifest(run_dir)
    events = read_events(spark, run_dir, manifest).cache()
    nodes = len(manifest["plan"]["nodes"])
    honest = [n["id"] for n in manifest["plan"]["nodes"] if n.get("role", "honest") == "honest"]
    # the workload is the honest nodes' publishes (an attacker's flood is traffic, not workload)
    all_pubs = M.publishes(events).where(F.col("origin").isin(honest)).cache()
    subs = subscriptions_frame(spark, manifest)
    all_dl = M.deliveries(events, M.expected_receivers(all_pubs, subs)).cache()
    window = measure_window(manifest)
    pubs = all_pubs.where(F.col("t_pub") >= window["from_ns"]).cache() if window["from_ns"] else all_pubs
    dl = all_dl.where(F.col("t_pub") >= window["from_ns"]).cache() if window["from_ns"] else all_dl
    msgs = M.per_message(dl).cache()
    totals = M.traffic(events)
    cal = manifest.get("calibration") or {}
    result = {
        "run_id": manifest["run_id"],
        "nodes": nodes,
        "messages": pubs.count(),
        "window": {"from_s": window["from_s"], "messages_before": all_pubs.count() - pubs.count()},
        "delivery_ratio": M.delivery_ratio(msgs),
        "latency_ms": M.latency_stats(dl),
        "coverage_latency_ms": M.coverage_summary(msgs),
        "duplicates_per_node": M.duplicates_per_node(totals, nodes),
        "bytes": M.bytes_sent(totals),
        "shaping": {"mode": manifest.get("shaping", {}).get("mode"),
                    "latency_error_pct": cal.get("latency_error_pct"),
                    "bandwidth_error_pct": cal.get("bandwidth_error_pct")},
        "events": events.count(),
    }
    intervals = faults.up_intervals(events, manifest)
    dl_up = faults.deliveries_up(dl, faults.intervals_frame(spark, intervals), faults.window_ns(manifest)).cache()
    result["delivery_ratio_up"] = faults.ratio(dl_up)
    result["accounting"] = faults.accounting(manifest["plan"], manifest.get("t0_ns"), intervals, events)
    cuts = faults.partitions(manifest, pubs, dl_up)
    if cuts:
        result["partitions"] = cuts
    topics, subscribers = V.per_topic(dl, pubs).cache(), V.per_subscriber(dl).cache()
    result["per_topic"] = {"topics": topics.count(), "delivery_ratio": V.spread(topics, "delivery_ratio"),
                           "p50_ms": V.spread(topics, "p50_ms")}
    result["per_subscriber"] = {"subscribers": subscribers.count(),
                                "delivery_ratio": V.spread(subscribers, "delivery_ratio"),
                                "p99_ms": V.spread(subscribers, "p99_ms")}
    impact = V.attack_impact(dl, pubs, manifest["plan"])
    if impact:
        result["attack"] = impact
    t0 = manifest.get("t0_ns") or 0
    per_second = Tr.bandwidth(events, t0).cache()
    publishing = Tr.publishing_window(manifest)
    result["bandwidth"] = Tr.bandwidth_summary(per_second, publishing, t0, nodes)
    result["control"] = Tr.control_counts(events)
    result["connections"] = Tr.connections(events, publishing[1] if publishing else None)
    usage, per_node_usage = Tr.resources(events)
    if usage:
        result["resources"] = usage
    extra = EXTRAS.get(manifest["plan"]["protocol"])
    extra_tables, extra_plots = {}, {}
    if extra:
        result["protocol"], extra_tables, extra_plots = extra.compute(
            RunFrames(events, pubs, dl, msgs, manifest, all_pubs, all_dl))
    if write_tables:
        run = F.lit(manifest["run_id"]).alias("run")
        tables = run_dir / "analysis" / "tables"
        # partitioned by run and node, so that the tables of many runs read as one data set
        events.select(run, "*").write.mode("overwrite").partitionBy("run", "node").parquet(str(tables / "events"))
        for name, frame in {"deliveries": dl, "messages": msgs.join(pubs, "msg_id"), "topics": topics,
                            "subscribers": subscribers, "bandwidth": per_second,
                            "bytes_per_node": M.bytes_per_node(events), "resources": per_node_usage,
                            **extra_tables}.items():
            frame.select(run, "*").write.mode("overwrite").partitionBy("run").parquet(str(tables / name))

    sample = dl.select("msg_id", "latency_ms").limit(PLOT_SAMPLE).toPandas()
    upload = (per_second.groupBy("second").agg(F.sum("data").alias("data"), F.sum("control").alias("control"))
              .orderBy("second").toPandas())
    plots = {"latency CDF": latency_cdf_plot({"": sample["latency_ms"].dropna().to_numpy()}),
             "coverage over time": coverage_plot({"": by_message(sample)}),
             "bandwidth over time": bandwidth_plot(upload, nodes, publishing, t0),
             **extra_plots}
    for frame in (events, topics, subscribers, per_second, msgs):
        frame.unpersist()
    return result, plots


def measure_window(manifest: dict[str, Any]) -> dict[str, Any]:
    """Where the measured messages start: analysis.measure_from after T0 (0: every message)."""
    start = float((manifest["scenario"].get("analysis") or {}).get("measure_from") or 0.0)
    t0 = manifest.get("t0_ns")
    return {"from_s": start, "from_ns": int(t0 + start * 1e9) if start and t0 else 0}


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
