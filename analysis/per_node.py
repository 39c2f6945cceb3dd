"""Everything counted per node, in one pass over the events: events, last event, duplicates, bytes
and control entries sent and received, connections, resource samples, and the few events that
up intervals and accounting read one by one (t0, stop, publish_message: `marks`).

The metrics that add these up (duplicates and bytes, control, connections, resources, the bytes the
nodes logged beside the kernel's counters, when each node was last heard of) and the bytes_per_node
and resources tables read this one frame of one row per node, instead of each scanning the log.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.registry import table
from analysis.traffic import BYTE_COLUMNS, CONTROL_TYPES

if TYPE_CHECKING:
    from analysis.run_data import RunData


MARKS = ("t0", "stop", "publish_message")


def node_totals(events: DataFrame, t0_ns: int, until_ns: int | None) -> DataFrame:
    """One row per node. `until_ns`: the instant at which open connections are counted (the end of
    the publishing window; None: the end of the log)."""
    kind = F.col("type")
    send, recv, res = kind == "send_rpc", kind == "recv_rpc", kind == "resources"
    conn = kind.isin("connect", "disconnect")
    counted = conn & (F.col("ts") < F.lit(until_ns)) if until_ns else conn

    def sent(column: str) -> Any:
        return F.sum(F.when(send, F.col(column)))

    totals = events.groupBy("node").agg(
        F.count("*").alias("events"), F.max("ts").alias("last_ts"),
        F.count_if(kind == "duplicate_message").alias("duplicates"),
        *(sent(c).alias(f"sent_{c}") for c in (*CONTROL_TYPES, *BYTE_COLUMNS)),
        F.sum(F.when(recv, F.col("bytes"))).alias("received_bytes"),
        F.sum(F.when(send & (F.col("ts") >= F.lit(t0_ns)), F.col("bytes"))).alias("sent_bytes_since_t0"),
        F.count_if(kind == "connect").alias("connects"), F.count_if(kind == "disconnect").alias("disconnects"),
        F.coalesce(F.sum(F.when(counted, F.when(kind == "connect", 1).otherwise(-1))), F.lit(0)).alias("open"),
        F.count_if(res).alias("samples"),
        F.max(F.when(res, F.col("cpu_s"))).alias("_cpu_hi"), F.min(F.when(res, F.col("cpu_s"))).alias("_cpu_lo"),
        F.max(F.when(res, F.col("ts"))).alias("_res_hi"), F.min(F.when(res, F.col("ts"))).alias("_res_lo"),
        F.max(F.when(res, F.col("rss_bytes"))).alias("rss_peak_bytes"),
        F.collect_list(F.when(kind.isin(*MARKS), F.struct("type", "ts"))).alias("marks"))
    # CPU share of one core over the node's logged lifetime (null with a single sample)
    share = F.try_divide(F.col("_cpu_hi") - F.col("_cpu_lo"), (F.col("_res_hi") - F.col("_res_lo")) / 1e9)
    return totals.withColumn("cpu_share", share).drop("_cpu_hi", "_cpu_lo", "_res_hi", "_res_lo")


def bytes_per_node(totals: DataFrame) -> DataFrame:
    """node, bytes_sent, bytes_received: the nodes that sent or received any RPC."""
    return totals.where(F.col("sent_bytes").isNotNull() | F.col("received_bytes").isNotNull()).select("node", F.col("sent_bytes").alias("bytes_sent"), F.col("received_bytes").alias("bytes_received"))


def resources_per_node(totals: DataFrame) -> DataFrame:
    return totals.where(F.col("samples") > 0).select("node", "cpu_share", "rss_peak_bytes", "samples")


@table("bytes_per_node")
def _bytes_per_node_table(run: RunData) -> DataFrame:
    return bytes_per_node(run.node_totals)


@table("resources")
def _resources_table(run: RunData) -> DataFrame:
    return resources_per_node(run.node_totals)
