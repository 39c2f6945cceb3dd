"""What the nodes spent: bandwidth over time (data, control, each control message type), control
message counts, connections, and CPU and RSS when the nodes logged them.

Steady-state figures use the scenario's publishing window: after the warm-up (T0 + workload.warmup)
and before the drain (T0 + warmup + duration), so mesh building and the tail do not dilute them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.registry import metric, table

if TYPE_CHECKING:
    from analysis.run_data import RunData

CONTROL_TYPES = ("ihave", "iwant", "idontwant", "graft", "prune")
BYTE_COLUMNS = ("bytes", "data_bytes", *(f"{k}_bytes" for k in CONTROL_TYPES))


def publishing_window(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """(from_ns, to_ns) of the publishing window, None when the run never reached T0."""
    t0, plan = manifest.get("t0_ns"), manifest["plan"]
    if not t0:
        return None
    start = t0 + int(plan.get("warmup", 0) * 1e9)
    return start, start + int(plan.get("duration", 0) * 1e9)


def bandwidth(events: DataFrame, t0_ns: int) -> DataFrame:
    """Bytes each node sent per second since T0: second, node, bytes, data, control, and one column
    per control message type (`other`: framing, envelopes, subscriptions, protocol-specific)."""
    sent = events.where(F.col("type") == "send_rpc").withColumn(
        "second", F.floor((F.col("ts") - F.lit(t0_ns)) / F.lit(1e9)).cast("long"))
    per = sent.groupBy("second", "node").agg(*(F.sum(F.coalesce(c, F.lit(0))).alias(c) for c in BYTE_COLUMNS))
    typed = sum((F.col(f"{k}_bytes") for k in CONTROL_TYPES), F.lit(0))
    return (per.withColumnRenamed("data_bytes", "data")
            .withColumn("control", F.col("bytes") - F.col("data"))
            .withColumn("other", F.col("control") - typed)
            .orderBy("second", "node"))


def bandwidth_summary(per_second: DataFrame, window: tuple[int, int] | None, t0_ns: int,
                      nodes: int) -> dict[str, Any]:
    """Mean upload per node over the publishing window (Mbit/s), split data/control, and the busiest
    node-second."""
    if window is None or window[1] <= window[0] or not nodes:
        return {}
    lo, hi = (window[0] - t0_ns) // 10**9, (window[1] - t0_ns) // 10**9
    seconds = max(1, hi - lo)
    row = (per_second.where((F.col("second") >= lo) & (F.col("second") < hi))
           .agg(F.sum("bytes").alias("b"), F.sum("data").alias("d"), F.max("bytes").alias("peak")).first())
    mbit = lambda b: (b or 0) * 8 / 1e6 / seconds / nodes  # noqa: E731
    return {"window_s": [lo, hi], "mean_mbit_per_node": mbit(row["b"]), "data_mbit_per_node": mbit(row["d"]),
            "control_mbit_per_node": mbit((row["b"] or 0) - (row["d"] or 0)),
            "peak_node_mbit": (row["peak"] or 0) * 8 / 1e6}


def control_counts(events: DataFrame) -> dict[str, dict[str, int]]:
    """Control entries sent by type (message ids for ihave/iwant/idontwant, topics for graft/prune),
    and bytes sent by message type: data (payloads), each control type, and `other` (framing,
    envelopes, subscriptions, protocol-specific frames)."""
    row = (events.where(F.col("type") == "send_rpc")
           .agg(*(F.sum(c).alias(c) for c in (*CONTROL_TYPES, *BYTE_COLUMNS))).first())
    got = {k: int(row[k] or 0) for k in row.asDict()}
    by_type = {"data": got["data_bytes"], **{k: got[f"{k}_bytes"] for k in CONTROL_TYPES}}
    by_type["other"] = got["bytes"] - sum(by_type.values())
    return {"entries": {k: got[k] for k in CONTROL_TYPES}, "bytes_by_type": by_type}


def connections(events: DataFrame, until_ns: int | None) -> dict[str, Any]:
    """Connections made and lost (each end logs its own), and each node's open connections at
    `until_ns` (the end of the publishing window; the stop closes them all) as mean, min, max."""
    conn = events.where(F.col("type").isin("connect", "disconnect"))
    counts = {r["type"]: r["count"] for r in conn.groupBy("type").count().collect()}
    upto = conn.where(F.col("ts") < until_ns) if until_ns else conn
    net = (events.select("node").distinct()  # a node that never connected has 0 open
           .join(upto.groupBy("node").agg(F.sum(F.when(F.col("type") == "connect", 1).otherwise(-1)).alias("open")),
                 "node", "left").fillna(0, ["open"]))
    row = net.agg(F.mean("open").alias("mean"), F.min("open").alias("min"), F.max("open").alias("max")).first()
    return {"connects": counts.get("connect", 0), "disconnects": counts.get("disconnect", 0),
            "open_at_window_end": {"mean": row["mean"], "min": row["min"], "max": row["max"]}}


def resources(events: DataFrame) -> tuple[dict[str, Any] | None, DataFrame]:
    """Per-node CPU (share of one core, over its logged lifetime) and peak RSS, from `resources`
    events; None when no node logged them (the simulation does not)."""
    samples = events.where(F.col("type") == "resources")
    per_node = samples.groupBy("node").agg(
        F.try_divide(F.max("cpu_s") - F.min("cpu_s"), (F.max("ts") - F.min("ts")) / 1e9).alias("cpu_share"),
        F.max("rss_bytes").alias("rss_peak_bytes"), F.count("*").alias("samples"))
    row = per_node.agg(F.mean("cpu_share").alias("cpu"), F.max("cpu_share").alias("cpu_max"),
                       F.mean("rss_peak_bytes").alias("rss"), F.max("rss_peak_bytes").alias("rss_max"),
                       F.count("*").alias("nodes")).first()
    if not row["nodes"]:
        return None, per_node
    return {"nodes": row["nodes"], "cpu_share_mean": row["cpu"], "cpu_share_max": row["cpu_max"],
            "rss_peak_mb_mean": (row["rss"] or 0) / 2**20, "rss_peak_mb_max": (row["rss_max"] or 0) / 2**20}, per_node


# metrics.json: bandwidth, control, connections, resources ------------------------------------------
@metric("bandwidth")
def _bandwidth(run: RunData) -> dict[str, Any]:
    return bandwidth_summary(run.per_second, run.publishing, run.t0, run.nodes)


@metric("control")
def _control(run: RunData) -> dict[str, dict[str, int]]:
    return control_counts(run.events)


@metric("connections")
def _connections(run: RunData) -> dict[str, Any]:
    return connections(run.events, run.publishing[1] if run.publishing else None)


@metric("resources")
def _resources(run: RunData) -> dict[str, Any] | None:
    return run.resources[0] or None


@table("bandwidth")
def _bandwidth_table(run: RunData) -> DataFrame:
    return run.per_second


@table("resources")
def _resources_table(run: RunData) -> DataFrame:
    return run.resources[1]
