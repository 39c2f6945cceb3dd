"""gossipsub-interop's analysis of a run (libp2p/test-plans, analyze_message_deliveries.py), restated on
peerlab's events, so that a peerlab figure can be set beside one of theirs line for line.

Its definitions, per message, in the order of their first delivery anywhere:
- time zero is the message's first delivery at any node (not its publication: their logs have none);
- time to disseminate: its last first-copy delivery after time zero; p50: the delivery at index
  len // 2 of the sorted deliveries after time zero (seconds);
- average duplicates: the message's duplicate copies received by all nodes, over the node count;
- reach: the nodes that got it over the node count less one (the publisher), at most 1;
- the first `skip` messages left out (their `--skip`; here the run's warm-up messages).
And their four plots: time to disseminate and average duplicates per message (bars), every message's
delivery CDF from its time zero, and delivery times by the receiver's region (boxes, where the latency
model placed nodes in regions).
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.report import plt, png

CDF_MESSAGES = 40     # messages drawn in the CDF plot (a legend beyond that says nothing)


def per_message(events: DataFrame, skip: int, nodes: int) -> list[dict[str, Any]]:
    """gossipsub-interop's table: one row per message but the first `skip` (by first delivery)."""
    first = (events.where(F.col("type") == "deliver_message").groupBy("msg_id", "node").agg(F.min("ts").alias("ts"))
             .groupBy("msg_id").agg(F.sort_array(F.collect_list("ts")).alias("times")))
    dups = events.where(F.col("type") == "duplicate_message").groupBy("msg_id").agg(F.count("*").alias("dups"))
    rows = (first.join(dups, "msg_id", "left")
            .select("msg_id", F.element_at("times", 1).alias("t0"), F.element_at("times", -1).alias("last"),
                    F.element_at("times", (F.size("times") / 2).cast("int") + 1).alias("mid"),
                    F.size("times").alias("delivered"), F.coalesce("dups", F.lit(0)).alias("dups"))
            .orderBy("t0", "msg_id").collect())
    return [{"msg_id": r["msg_id"], "time_to_disseminate_s": (r["last"] - r["t0"]) / 1e9,
             "p50_s": (r["mid"] - r["t0"]) / 1e9, "avg_duplicates": r["dups"] / nodes,
             "reach": min(1.0, r["delivered"] / max(nodes - 1, 1))} for r in rows[skip:]]


def _bars(rows: list[dict[str, Any]], key: str, ylabel: str, title: str) -> str:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.bar(range(len(rows)), [r[key] for r in rows])
    ax.set_xticks(range(len(rows)), [r["msg_id"] for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_xlabel("message (in order of first delivery)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    return png(fig)


def plots(events: DataFrame, rows: list[dict[str, Any]], regions: dict[str, str]) -> dict[str, str]:
    kept = [r["msg_id"] for r in rows]
    times = (events.where((F.col("type") == "deliver_message") & F.col("msg_id").isin(kept))
             .groupBy("msg_id", "node").agg(F.min("ts").alias("ts")).toPandas())
    times["s"] = (times["ts"] - times.groupby("msg_id")["ts"].transform("min")) / 1e9
    out = {"gossipsub-interop: time to disseminate": _bars(rows, "time_to_disseminate_s", "seconds",
                                                            "Time to disseminate (last - first delivery)"),
           "gossipsub-interop: duplicates": _bars(rows, "avg_duplicates", "duplicates per node",
                                                  "Average duplicate count")}
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for msg_id in kept[:CDF_MESSAGES]:
        xs = times.loc[times["msg_id"] == msg_id, "s"].sort_values().to_numpy()
        ax.plot(xs, range(1, len(xs) + 1), marker="o", markersize=2, alpha=0.7)
    ax.set_xlabel("time since the first delivery (s)")
    ax.set_ylabel("nodes with the message")
    ax.set_title("Message delivery CDF")
    ax.grid(alpha=0.3)
    out["gossipsub-interop: delivery CDF"] = png(fig)
    if regions:
        times["region"] = times["node"].map(regions)
        names = sorted(times["region"].dropna().unique())
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        ax.boxplot([times.loc[times["region"] == n, "s"].to_numpy() for n in names], tick_labels=names)
        ax.set_ylabel("delivery time since the first (s)")
        ax.set_title("Delivery time by region")
        ax.tick_params(axis="x", rotation=45)
        ax.grid(alpha=0.3)
        out["gossipsub-interop: delivery by region"] = png(fig)
    return out


def dissemination(events: DataFrame, manifest: dict[str, Any], skip: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The metrics.json section (definitions, the table, its means) and the four plots."""
    nodes = len(manifest["plan"]["nodes"])
    rows = per_message(events, skip, nodes)
    regions = {n["id"]: n["placement"]["region"] for n in manifest["plan"]["nodes"]
               if (n.get("placement") or {}).get("region")}
    means = {k: (sum(r[k] for r in rows) / len(rows) if rows else None)
             for k in ("time_to_disseminate_s", "p50_s", "avg_duplicates", "reach")}
    section = {"definition": "gossipsub-interop's analyze_message_deliveries.py: time zero = a message's first "
                             "delivery anywhere; messages in order of it, the first `skipped` left out",
               "skipped": skip, "messages": rows, "mean": means}
    return section, plots(events, rows, regions) if rows else {}
