"""How nodes relay, from the RPCs they logged (`send_rpc`, `recv_rpc`), for any implementation:

- `mesh`: each node's mesh, followed through the GRAFTs and PRUNEs it sent and received (a peer joins
  on a GRAFT either way and leaves on a PRUNE either way), sampled at each of its deliveries: mean
  and distribution. It is what explains the number of copies a node forwards.
- `relaying`: for each first copy a node received, how long until it forwarded the message (its
  first `send_rpc` carrying data after the delivery) and until its last forward, and how many
  forwards it made (0 for a node that forwarded nothing). Sends carry no message id, so only
  deliveries alone at their node for `RELAY_WINDOW_NS` on either side (no other delivery or publish
  there) are used: the sends in the window after one are that message's. `deliveries_used` says
  how many qualified (none in a run whose messages are closer together than that).

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: analysis.metrics; never registry, run_data or catalogue.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis.metrics import summarize

RELAY_WINDOW_NS = 1_000_000_000


def mesh_sizes(events: DataFrame) -> DataFrame:
    """(node, ts, size): a node's mesh size at each of its deliveries."""
    changes = (events.where(F.col("type").isin("send_rpc", "recv_rpc")
                            & ((F.coalesce("graft", F.lit(0)) > 0) | (F.coalesce("prune", F.lit(0)) > 0)))
               .select("node", "peer", "ts", (F.coalesce("prune", F.lit(0)) == 0).cast("int").alias("in_mesh")))
    by_pair = Window.partitionBy("node", "peer").orderBy("ts")
    # +1 when a peer joins, -1 when it leaves, 0 for a GRAFT to a peer already in (or a PRUNE to one out)
    deltas = (changes.withColumn("delta", F.col("in_mesh") - F.coalesce(F.lag("in_mesh").over(by_pair), F.lit(0)))
              .select("node", "ts", "delta"))
    samples = events.where(F.col("type") == "deliver_message").select("node", "ts", F.lit(None).cast("int").alias("delta"))
    by_node = Window.partitionBy("node").orderBy("ts", F.col("delta").asc_nulls_last()).rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    timeline = deltas.unionByName(samples).withColumn("size", F.sum(F.coalesce("delta", F.lit(0))).over(by_node))
    return timeline.where(F.col("delta").isNull()).select("node", "ts", "size")


def mesh_summary(sizes: DataFrame) -> dict[str, Any] | None:
    rows = sizes.groupBy("size").count().collect()
    total = sum(r["count"] for r in rows)
    if not total or not any(r["size"] for r in rows):
        return None  # no GRAFT logged: an implementation that does not log its RPCs
    return {"mean_at_delivery": round(sum(r["size"] * r["count"] for r in rows) / total, 2),
            "sizes_at_delivery": {str(r["size"]): r["count"] for r in sorted(rows, key=lambda r: r["size"])}}


def relays(events: DataFrame) -> DataFrame:
    """(node, ts, first_ms, last_ms, forwards) for each delivery alone at its node in RELAY_WINDOW_NS."""
    marks = events.where(F.col("type").isin("deliver_message", "publish_message")).select("node", "ts", "type")
    by_node = Window.partitionBy("node").orderBy("ts")
    alone = (marks.withColumn("next", F.lead("ts").over(by_node)).withColumn("previous", F.lag("ts").over(by_node))
             .where((F.col("type") == "deliver_message")
                    & (F.col("next").isNull() | (F.col("next") - F.col("ts") >= RELAY_WINDOW_NS))
                    & (F.col("previous").isNull() | (F.col("ts") - F.col("previous") >= RELAY_WINDOW_NS)))
             .select("node", F.col("ts").alias("delivered")))
    sends = (events.where((F.col("type") == "send_rpc") & (F.coalesce("data_bytes", F.lit(0)) > 0))
             .select(F.col("node").alias("sender"), F.col("ts").alias("sent")))
    joined = alone.join(sends, on=(F.col("node") == F.col("sender")) & (F.col("sent") >= F.col("delivered"))
                        & (F.col("sent") < F.col("delivered") + F.lit(RELAY_WINDOW_NS)), how="left")
    return (joined.groupBy("node", "delivered")
            .agg(((F.min("sent") - F.col("delivered")) / 1e6).alias("first_ms"),
                 ((F.max("sent") - F.col("delivered")) / 1e6).alias("last_ms"),
                 F.count("sent").alias("forwards")))


def relay_summary(per_delivery: DataFrame) -> dict[str, Any] | None:
    per_delivery = per_delivery.select("forwards", "first_ms", "last_ms").cache()  # the join, evaluated once
    try:
        row, q = summarize(per_delivery, {"first_ms": (0.5, 0.9), "last_ms": (0.5, 0.9)},
                           [F.count("*").alias("n"), F.avg("forwards").alias("forwards")])
    finally:
        per_delivery.unpersist()
    first, last = q["first_ms"], q["last_ms"]
    if not row["n"] or first is None or last is None:
        return None
    return {"deliveries_used": row["n"], "forwards_per_delivery": round(row["forwards"], 2),
            "first_forward_ms": {"p50": round(first[0], 2), "p90": round(first[1], 2)},
            "last_forward_ms": {"p50": round(last[0], 2), "p90": round(last[1], 2)}}
