"""Metric jobs: pure functions from DataFrames to DataFrames or plain numbers.

Delivery is counted against expected receivers: the planned subscribers of a message's topic, the
publisher excluded. Latency is receive time minus publish time (one host clock locally; the
manifest's clock offsets apply on other backends).
"""
from __future__ import annotations

import math
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

COVERAGE_POINTS = (15, 50, 90, 100)


def publishes(events: DataFrame) -> DataFrame:
    """One row per published message: msg_id, topic, origin, t_pub (ns), size."""
    return (events.where(F.col("type") == "publish_message")
            .groupBy("msg_id").agg(F.first("topic").alias("topic"), F.first("node").alias("origin"),
                                   F.min("ts").alias("t_pub"), F.first("size").alias("size")))


def expected_receivers(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """(msg_id, receiver) for every subscriber of the message's topic other than its publisher."""
    return (pubs.join(subs, "topic").where(F.col("node") != F.col("origin"))
            .select("msg_id", F.col("node").alias("receiver"), "t_pub"))


def deliveries(events: DataFrame, expected: DataFrame) -> DataFrame:
    """Every expected (msg_id, receiver) with its first delivery latency in ms (null if never)."""
    got = (events.where(F.col("type") == "deliver_message")
           .groupBy("msg_id", F.col("node").alias("receiver")).agg(F.min("ts").alias("t_recv")))
    return (expected.join(got, ["msg_id", "receiver"], "left")
            .withColumn("latency_ms", (F.col("t_recv") - F.col("t_pub")) / 1e6))


def per_message(dl: DataFrame) -> DataFrame:
    """msg_id, expected, delivered, delivery_ratio."""
    return (dl.groupBy("msg_id").agg(F.count("*").alias("expected"), F.count("t_recv").alias("delivered"))
            .withColumn("delivery_ratio", F.col("delivered") / F.col("expected")))


def delivery_ratio(msgs: DataFrame) -> float | None:
    row = msgs.agg(F.sum("delivered").alias("d"), F.sum("expected").alias("e")).first()
    return None if not row["e"] else row["d"] / row["e"]


def latency_stats(dl: DataFrame) -> dict[str, float | None]:
    row = (dl.where(F.col("latency_ms").isNotNull())
           .agg(F.percentile("latency_ms", F.array(F.lit(0.5), F.lit(0.9), F.lit(0.99))).alias("p"),
                F.mean("latency_ms").alias("mean"), F.max("latency_ms").alias("max"),
                F.min("latency_ms").alias("min"), F.count("*").alias("n")).first())
    if not row["n"]:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None, "min": None, "count": 0}
    p50, p90, p99 = row["p"]
    return {"p50": p50, "p90": p90, "p99": p99, "mean": row["mean"], "max": row["max"], "min": row["min"],
            "count": row["n"]}


def coverage(dl: DataFrame, points: tuple[int, ...] = COVERAGE_POINTS) -> DataFrame:
    """Expanding coverage latency per message: L_x = time until x% of its expected receivers hold it
    (null when it never got there). Columns msg_id, expected, L15, L50, ..."""
    ranked = (dl.where(F.col("latency_ms").isNotNull())
              .withColumn("rank", F.row_number().over(Window.partitionBy("msg_id").orderBy("latency_ms"))))
    counts = dl.groupBy("msg_id").agg(F.count("*").alias("expected"))
    out = counts
    for x in points:
        need = ranked.join(counts, "msg_id").where(F.col("rank") == F.ceil(F.col("expected") * x / 100))
        out = out.join(need.select("msg_id", F.col("latency_ms").alias(f"L{x}")), "msg_id", "left")
    return out


def coverage_summary(cov: DataFrame, points: tuple[int, ...] = COVERAGE_POINTS) -> dict[str, Any]:
    aggs = []
    for x in points:
        aggs += [F.mean(f"L{x}").alias(f"L{x}"), F.stddev(f"L{x}").alias(f"L{x}_sd"),
                 F.count(f"L{x}").alias(f"L{x}_n")]
    row = cov.agg(*aggs, F.count("*").alias("messages")).first()
    out: dict[str, Any] = {f"L{x}": row[f"L{x}"] for x in points}
    out["deviation"] = {f"L{x}": row[f"L{x}_sd"] for x in points}
    out["messages_reaching"] = {f"L{x}": row[f"L{x}_n"] for x in points}
    return out


def duplicates_per_node(events: DataFrame, nodes: int) -> float:
    return events.where(F.col("type") == "duplicate_message").count() / nodes if nodes else math.nan


def bytes_sent(events: DataFrame) -> dict[str, int]:
    row = (events.where(F.col("type") == "send_rpc")
           .agg(F.sum("bytes").alias("total"), F.sum("data_bytes").alias("data")).first())
    total, data = int(row["total"] or 0), int(row["data"] or 0)
    return {"data_sent": data, "control_sent": total - data, "total_sent": total}


def bytes_per_node(events: DataFrame) -> DataFrame:
    return (events.where(F.col("type").isin("send_rpc", "recv_rpc"))
            .groupBy("node").pivot("type", ["send_rpc", "recv_rpc"]).agg(F.sum("bytes"))
            .withColumnRenamed("send_rpc", "bytes_sent").withColumnRenamed("recv_rpc", "bytes_received"))
