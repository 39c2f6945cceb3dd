"""Analysis of the protocols that run on the Kademlia DHT (PulsarCast, ScoutSubs, FastDelivery):
- per subscriber: events expected, missing and duplicated (the SmartPubSub paper's correctness
  measures; a duplicate is a second copy of an event the subscriber was expected to get);
- DHT lookups: how many, RPCs per lookup, duration, values found;
- ScoutSubs' subscription latency (reliable variant: subscribe to the rendezvous' acknowledgement);
- PulsarCast history rebuilds: each walk's completeness = the events of its topic published before
  the walk started (by others) that the node holds at its end (delivered by the tree or recovered by
  the walk) / all of them.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.extras.registration import ExtraResult, RunFrames, register
from analysis.metrics import summarize


def subscriber_events(run: RunFrames) -> DataFrame:
    """receiver, expected, delivered, missing, duplicated."""
    dups = (run.events.where(F.col("type") == "duplicate_message")
            .select(F.col("node").alias("receiver"), "msg_id"))
    expected = run.deliveries.select("msg_id", "receiver", "t_recv")
    dup_counts = (expected.join(dups, ["msg_id", "receiver"])
                  .groupBy("receiver").agg(F.count("*").alias("duplicated")))
    return (expected.groupBy("receiver").agg(F.count("*").alias("expected"), F.count("t_recv").alias("delivered"))
            .withColumn("missing", F.col("expected") - F.col("delivered"))
            .join(dup_counts, "receiver", "left").fillna(0, ["duplicated"]).orderBy("receiver"))


def lookups(events: DataFrame) -> dict[str, Any]:
    got = events.where(F.col("type") == "dht_lookup")
    row, q = summarize(got, {"delay_ms": (0.5, 0.99)}, [
        F.count("*").alias("n"), F.mean("msgs").alias("rpcs"), F.count_if(F.col("reason") == "value").alias("gets"),
        F.count_if((F.col("reason") == "value") & (F.col("found") > 0)).alias("found")])
    q = q["delay_ms"] or [None, None]
    return {"lookups": row["n"], "rpcs_per_lookup": row["rpcs"], "p50_ms": q[0], "p99_ms": q[1],
            "value_gets": row["gets"], "values_found": row["found"]}


def subscription_latency(events: DataFrame) -> dict[str, Any] | None:
    """ScoutSubs (reliable): from subscribe to the rendezvous' acknowledgement (`subscribed`)."""
    got = events.where(F.col("type") == "subscribed")
    row, found = summarize(got, {"delay_ms": (0.5, 0.99)}, [F.count("*").alias("n"), F.mean("delay_ms").alias("mean")])
    q = found["delay_ms"]
    if not row["n"] or q is None:
        return None
    return {"subscriptions": row["n"], "mean_ms": row["mean"], "p50_ms": q[0], "p99_ms": q[1]}


def history_walks(run: RunFrames) -> dict[str, Any] | None:
    events = run.events
    walks = (events.where(F.col("type") == "history")
             .select("node", "topic", "ts", "delay_ms", "reason", "found", "messages").collect())
    if not walks:
        return None
    held = (events.where(F.col("type").isin("deliver_message", "history_event"))
            .select("node", "msg_id", "ts").collect())
    pubs = run.all_publishes.select("msg_id", "topic", "origin", "t_pub").collect()
    by_node: dict[str, list[tuple[int, str]]] = {}
    for row in held:
        by_node.setdefault(row["node"], []).append((row["ts"], row["msg_id"]))
    rows = []
    for w in walks:
        started = w["ts"] - int((w["delay_ms"] or 0) * 1e6)
        wanted = {p["msg_id"] for p in pubs if p["topic"] == w["topic"] and p["t_pub"] < started
                  and p["origin"] != w["node"]}
        have = {m for ts, m in by_node.get(w["node"], []) if ts <= w["ts"]}
        rows.append({"node": w["node"], "topic": w["topic"], "reason": w["reason"], "recovered": w["found"],
                     "wanted": len(wanted), "held": len(wanted & have),
                     "completeness": len(wanted & have) / len(wanted) if wanted else None})
    scored = [r for r in rows if r["completeness"] is not None]
    return {"walks": len(rows), "recovered": sum(r["recovered"] or 0 for r in rows),
            "complete_walks": sum(1 for r in rows if r["reason"].endswith("complete")),
            "completeness_mean": sum(r["completeness"] for r in scored) / len(scored) if scored else None,
            "completeness_min": min((r["completeness"] for r in scored), default=None),
            "per_walk": rows[:200]}


@register("pulsarcast", "scoutsubs", "fastdelivery", columns=[
    ("missing", lambda p: p["subscribers"]["missing"]),
    ("duplicated", lambda p: p["subscribers"]["duplicated"]),
    ("dup_ratio", lambda p: p["subscribers"]["duplicate_ratio"]),
    ("history_completeness", lambda p: (p.get("history") or {}).get("completeness_mean")),
])
def dht_extra(run: RunFrames) -> ExtraResult:
    subs = subscriber_events(run).cache()
    row = subs.agg(F.sum("expected").alias("e"), F.sum("delivered").alias("d"), F.sum("missing").alias("m"),
                   F.sum("duplicated").alias("u"), F.max("missing").alias("worst")).first()
    delivered = int(row["d"] or 0)
    out: dict[str, Any] = {
        "subscribers": {"expected": int(row["e"] or 0), "delivered": delivered, "missing": int(row["m"] or 0),
                        "duplicated": int(row["u"] or 0), "most_missing": int(row["worst"] or 0),
                        "duplicate_ratio": (int(row["u"] or 0) / delivered) if delivered else None},
        "dht": lookups(run.events),
    }
    history = history_walks(run)
    if history:
        out["history"] = history
    subscribed = subscription_latency(run.events)
    if subscribed:
        out["subscription_latency_ms"] = subscribed
    return out, {"subscriber_events": subs}, {}
