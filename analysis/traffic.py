"""What the nodes spent: bandwidth over time (data, control, each control message type), control
message counts, connections, and CPU and RSS when the nodes logged them.

Steady-state figures use the scenario's publishing window: after the warm-up (T0 + workload.warmup)
and before the drain (T0 + warmup + duration), so mesh building and the tail do not dilute them.

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: nothing of analysis; never registry, run_data or catalogue.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

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


def upload_per_second(per_second: DataFrame) -> list[dict[str, Any]]:
    """Each second since T0: bytes, data and control sent by all nodes, and the busiest node's bytes
    (what the bandwidth summary and the report's plot read: one row per second, at the driver)."""
    return [r.asDict() for r in per_second.groupBy("second").agg(
        F.sum("bytes").alias("bytes"), F.sum("data").alias("data"), F.sum("control").alias("control"),
        F.max("bytes").alias("peak")).orderBy("second").collect()]


def bandwidth_summary(seconds: list[dict[str, Any]], window: tuple[int, int] | None, t0_ns: int,
                      nodes: int) -> dict[str, Any]:
    """Mean upload per node over the publishing window (Mbit/s), split data/control, and the busiest
    node-second."""
    if window is None or window[1] <= window[0] or not nodes:
        return {}
    lo, hi = (window[0] - t0_ns) // 10**9, (window[1] - t0_ns) // 10**9
    span = max(1, hi - lo)
    inside = [r for r in seconds if lo <= r["second"] < hi]
    sent, data = sum(r["bytes"] or 0 for r in inside), sum(r["data"] or 0 for r in inside)
    mbit = lambda b: b * 8 / 1e6 / span / nodes  # noqa: E731
    return {"window_s": [lo, hi], "mean_mbit_per_node": mbit(sent), "data_mbit_per_node": mbit(data),
            "control_mbit_per_node": mbit(sent - data),
            "peak_node_mbit": max((r["peak"] or 0 for r in inside), default=0) * 8 / 1e6}


def total(rows: list[dict[str, Any]], column: str) -> int:
    """A per-node column (analysis/per_node.py) summed over the nodes, nulls as 0."""
    return sum(int(r[column] or 0) for r in rows)


def control_counts(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Control entries sent by type (message ids for ihave/iwant/idontwant, topics for graft/prune),
    and bytes sent by message type: data (payloads), each control type, and `other` (framing,
    envelopes, subscriptions, protocol-specific frames); from the per-node totals."""
    got = {c: total(rows, f"sent_{c}") for c in (*CONTROL_TYPES, *BYTE_COLUMNS)}
    by_type = {"data": got["data_bytes"], **{k: got[f"{k}_bytes"] for k in CONTROL_TYPES}}
    by_type["other"] = got["bytes"] - sum(by_type.values())
    return {"entries": {k: got[k] for k in CONTROL_TYPES}, "bytes_by_type": by_type}


def connections(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Connections made and lost (each end logs its own), and each node's open connections at the end
    of the publishing window (the stop closes them all) as mean, min, max; from the per-node totals
    (a node that never connected has 0 open)."""
    opened = [r["open"] for r in rows]
    return {"connects": total(rows, "connects"), "disconnects": total(rows, "disconnects"),
            "open_at_window_end": {"mean": sum(opened) / len(opened) if opened else None,
                                   "min": min(opened, default=None), "max": max(opened, default=None)}}


def resources(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per-node CPU (share of one core, over its logged lifetime) and peak RSS, from `resources`
    events, averaged over the nodes that logged them; None when none did (the simulation does not)."""
    sampled = [r for r in rows if r["samples"]]
    if not sampled:
        return None
    cpu = [r["cpu_share"] for r in sampled if r["cpu_share"] is not None]
    rss = [r["rss_peak_bytes"] for r in sampled if r["rss_peak_bytes"] is not None]
    return {"nodes": len(sampled), "cpu_share_mean": sum(cpu) / len(cpu) if cpu else None,
            "cpu_share_max": max(cpu, default=None),
            "rss_peak_mb_mean": (sum(rss) / len(rss) if rss else 0) / 2**20,
            "rss_peak_mb_max": max(rss, default=0) / 2**20}
