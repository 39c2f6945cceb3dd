"""Delivery seen from one side: per topic, per subscriber, and attackers' victims against the others.

All take the deliveries frame of analysis.metrics.deliveries (msg_id, receiver, t_pub, t_recv,
latency_ms; one row per expected receipt, t_recv null when it never came) and the publishes frame.

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: analysis.metrics; never registry, run_data or catalogue.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.metrics import group_quantile, small_quantiles


def _delivery_aggs() -> list:
    return [F.count("*").alias("expected"), F.count("t_recv").alias("delivered"),
            (F.count("t_recv") / F.count("*")).alias("delivery_ratio"),
            group_quantile("latency_ms", 0.5).alias("p50_ms"),
            group_quantile("latency_ms", 0.99).alias("p99_ms"),
            F.mean("latency_ms").alias("mean_ms")]


def per_topic(dl: DataFrame, pubs: DataFrame) -> DataFrame:
    """topic, messages, expected, delivered, delivery_ratio, p50_ms, p99_ms, mean_ms."""
    return (dl.join(pubs.select("msg_id", "topic"), "msg_id")
            .groupBy("topic").agg(F.countDistinct("msg_id").alias("messages"), *_delivery_aggs())
            .orderBy("topic"))


def per_subscriber(dl: DataFrame) -> DataFrame:
    """receiver, expected, delivered, delivery_ratio, p50_ms, p99_ms, mean_ms: one row per honest
    subscriber (the worst-served ones are what a mean hides)."""
    return dl.groupBy("receiver").agg(*_delivery_aggs()).orderBy("receiver")


def spread(rows: list[dict[str, Any]], column: str) -> dict[str, Any]:
    """min, p10, median and max of a per-topic or per-subscriber column (one row per topic or
    subscriber: small, so computed at the driver, by the same rule)."""
    values = [r[column] for r in rows if r[column] is not None]
    q = small_quantiles(values, (0.1, 0.5))
    if q is None:
        return {"min": None, "p10": None, "median": None, "max": None}
    return {"min": min(values), "p10": q[0], "median": q[1], "max": max(values)}


def victims(plan: dict[str, Any]) -> dict[str, Any]:
    """Whom the attackers aim at, from the plan: the victim topic of topic-drop attackers, and the
    honest nodes planned next to an attacker (its neighbours: the ones an eclipse, censor or spam
    attack reaches first)."""
    attackers = [n for n in plan["nodes"] if n.get("role", "honest") != "honest"]
    topics = sorted({n["behaviour"]["topic"] for n in attackers if n.get("behaviour", {}).get("topic")})
    bad = {n["id"] for n in attackers}
    near = {p for n in plan["nodes"] if n["id"] in bad for p in n.get("neighbours", [])}
    near |= {n["id"] for n in plan["nodes"] if bad & set(n.get("neighbours", []))}
    return {"attackers": sorted(bad), "topics": topics, "nodes": sorted(near - bad)}


def attack_impact(dl: DataFrame, pubs: DataFrame, plan: dict[str, Any]) -> dict[str, Any] | None:
    """Delivery ratio and latency of the victims against everyone else: messages on the victim
    topics against the other topics, receivers next to an attacker against the rest."""
    aim = victims(plan)
    if not aim["attackers"]:
        return None

    def sides(frame: DataFrame, is_victim: Any) -> dict[str, dict[str, Any]]:
        """Victims and others in one pass (a side with no receipt: nothing expected, nothing known)."""
        rows = {r["_victim"]: r for r in frame.groupBy(is_victim.alias("_victim")).agg(*_delivery_aggs()).collect()}
        keys = ("expected", "delivered", "delivery_ratio", "p50_ms", "p99_ms")
        empty = {"expected": 0, "delivered": 0, "delivery_ratio": None, "p50_ms": None, "p99_ms": None}
        return {name: {k: rows[flag][k] for k in keys} if flag in rows else dict(empty)
                for name, flag in (("victims", True), ("others", False))}

    out: dict[str, Any] = {"attackers": len(aim["attackers"])}
    if aim["topics"]:
        with_topic = dl.join(pubs.select("msg_id", "topic"), "msg_id")
        out["victim_topics"] = {"topics": aim["topics"], **sides(with_topic, F.col("topic").isin(aim["topics"]))}
    if aim["nodes"]:
        out["attacker_neighbours"] = {"nodes": len(aim["nodes"]), **sides(dl, F.col("receiver").isin(aim["nodes"]))}
    return out
