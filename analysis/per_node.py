"""Everything counted per node, in one pass over the events: events, last event, duplicates, bytes
and control entries sent and received, connections, resource samples; and, apart, the few events
that up intervals and accounting read one by one (t0, stop, publish_message, start, connect:
`mark_times`).

The metrics that add these up (duplicates and bytes, control, connections, resources, the bytes the
nodes logged beside the kernel's counters, when each node was last heard of) and the bytes_per_node
and resources tables read this one frame of one row per node, instead of each scanning the log.

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: analysis.traffic; never registry, run_data or catalogue.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.traffic import BYTE_COLUMNS, CONTROL_TYPES

MARKS = ("t0", "stop", "publish_message", "start", "connect")


def node_totals(events: DataFrame, t0_ns: int, until_ns: int | None) -> DataFrame:
    """One row per node. `until_ns`: the instant at which open connections are counted (the end of
    the publishing window; None: the end of the log).

    Two aggregations in one job: per (node, type), plain sums and extremes (cheap on every event),
    then per node, picking each figure from its event type's row (a handful of rows per node).
    Nothing here collects a list: an aggregation that does runs without generated code, and the
    first one sees every event (10 M events: 5.2 s with the marks' lists in it, 4 s for both apart)."""
    ts = F.col("ts")
    by_type = events.groupBy("node", "type").agg(
        F.count("*").alias("n"), F.max(ts).alias("last"), F.min(ts).alias("first"),
        *(F.sum(c).alias(c) for c in (*CONTROL_TYPES, *BYTE_COLUMNS)),
        F.sum(F.when(ts >= F.lit(t0_ns), F.col("bytes"))).alias("bytes_since_t0"),
        (F.count_if(ts < F.lit(until_ns)) if until_ns else F.count("*")).alias("before_until"),
        F.max("cpu_s").alias("cpu_hi"), F.min("cpu_s").alias("cpu_lo"), F.max("rss_bytes").alias("rss"))
    kind = F.col("type")
    send, res = kind == "send_rpc", kind == "resources"

    def of(condition: Any, column: str) -> Any:
        return F.when(condition, F.col(column))

    def count(condition: Any) -> Any:
        return F.coalesce(F.sum(of(condition, "n")), F.lit(0))

    totals = by_type.groupBy("node").agg(
        F.sum("n").alias("events"), F.max("last").alias("last_ts"),
        count(kind == "duplicate_message").alias("duplicates"),
        *(F.sum(of(send, c)).alias(f"sent_{c}") for c in (*CONTROL_TYPES, *BYTE_COLUMNS)),
        F.sum(of(kind == "recv_rpc", "bytes")).alias("received_bytes"),
        F.coalesce(F.sum(F.when(kind.isin("send_rpc", "recv_rpc"),
                                F.coalesce(F.col("graft"), F.lit(0)) + F.coalesce(F.col("prune"), F.lit(0)))),
                   F.lit(0)).alias("mesh_changes"),
        F.sum(of(send, "bytes_since_t0")).alias("sent_bytes_since_t0"),
        count(kind == "connect").alias("connects"), count(kind == "disconnect").alias("disconnects"),
        F.coalesce(F.sum(F.when(kind == "connect", F.col("before_until"))
                         .when(kind == "disconnect", -F.col("before_until"))), F.lit(0)).alias("open"),
        count(res).alias("samples"),
        F.max(of(res, "cpu_hi")).alias("_cpu_hi"), F.min(of(res, "cpu_lo")).alias("_cpu_lo"),
        F.max(of(res, "last")).alias("_res_hi"), F.min(of(res, "first")).alias("_res_lo"),
        F.max(of(res, "rss")).alias("rss_peak_bytes"))
    # CPU share of one core over the node's logged lifetime (null with a single sample)
    share = F.try_divide(F.col("_cpu_hi") - F.col("_cpu_lo"), (F.col("_res_hi") - F.col("_res_lo")) / 1e9)
    return totals.withColumn("cpu_share", share).drop("_cpu_hi", "_cpu_lo", "_res_hi", "_res_lo")


def mark_times(events: DataFrame) -> DataFrame:
    """(node, type, times): when each node logged its t0, stop, publish_message, start and connect events."""
    return (events.where(F.col("type").isin(*MARKS)).groupBy("node", "type")
            .agg(F.collect_list("ts").alias("times")))


def bytes_per_node(totals: DataFrame) -> DataFrame:
    """node, bytes_sent, bytes_received: the nodes that sent or received any RPC."""
    return totals.where(F.col("sent_bytes").isNotNull() | F.col("received_bytes").isNotNull()).select("node", F.col("sent_bytes").alias("bytes_sent"), F.col("received_bytes").alias("bytes_received"))


def resources_per_node(totals: DataFrame) -> DataFrame:
    return totals.where(F.col("samples") > 0).select("node", "cpu_share", "rss_peak_bytes", "samples")
