"""Metric jobs: pure functions from DataFrames to DataFrames or plain numbers.

Delivery is counted against expected receivers: the planned subscribers of a message's topic, the
publisher excluded. Latency is receive time minus publish time (one host clock locally; the
manifest's clock offsets apply on other backends).

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: analysis.traffic, analysis.per_node; never registry, run_data or catalogue.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis import traffic as Tr
from analysis.per_node import node_totals

COVERAGE_POINTS = (15, 50, 90, 100)


def publishes(events: DataFrame) -> DataFrame:
    """One row per published message: msg_id, topic, origin, t_pub (ns), size."""
    return (events.where(F.col("type") == "publish_message")
            .groupBy("msg_id").agg(F.first("topic").alias("topic"), F.first("node").alias("origin"),
                                   F.min("ts").alias("t_pub"), F.first("size").alias("size")))


def refused(events: DataFrame) -> DataFrame:
    """One row per publish the implementation refused (`publish_refused`): msg_id, origin, reason."""
    return (events.where(F.col("type") == "publish_refused")
            .groupBy("msg_id").agg(F.first("node").alias("origin"), F.first("reason").alias("reason")))


def expected_receivers(pubs: DataFrame, subs: DataFrame) -> DataFrame:
    """(msg_id, receiver) for every subscriber of the message's topic other than its publisher (a
    subscription with a `since` column: from that time on)."""
    pairs = pubs.join(subs, "topic").where(F.col("node") != F.col("origin"))
    if "since" in subs.columns:
        pairs = pairs.where(F.col("t_pub") >= F.col("since"))
    return pairs.select("msg_id", F.col("node").alias("receiver"), "t_pub")


def deliveries(events: DataFrame, expected: DataFrame) -> DataFrame:
    """Every expected (msg_id, receiver) with its first delivery latency in ms (null if never)."""
    got = (events.where(F.col("type") == "deliver_message")
           .groupBy("msg_id", F.col("node").alias("receiver")).agg(F.min("ts").alias("t_recv")))
    return (expected.join(got, ["msg_id", "receiver"], "left")
            .withColumn("latency_ms", (F.col("t_recv") - F.col("t_pub")) / 1e6))


def per_message(dl: DataFrame, points: tuple[int, ...] = COVERAGE_POINTS) -> DataFrame:
    """One row per message: msg_id, expected, delivered, delivery_ratio, and its expanding coverage
    latency L_x = time until x% of its expected receivers hold it (null when it never got there).

    One aggregation: each message's sorted latencies; L_x is the ceil(expected * x / 100)-th."""
    agg = dl.groupBy("msg_id").agg(F.count("*").alias("expected"), F.count("t_recv").alias("delivered"),
                                   F.sort_array(F.collect_list("latency_ms")).alias("_lat"))
    cols = []
    for x in points:
        rank = ((F.col("expected") * x + 99) / 100).cast("int")  # ceil, in integers
        cols.append(F.when(F.size("_lat") >= rank, F.element_at("_lat", rank)).alias(f"L{x}"))
    return agg.select("msg_id", "expected", "delivered",
                      (F.col("delivered") / F.col("expected")).alias("delivery_ratio"), *cols)


QUANTILES = (0.5, 0.9, 0.99)
_ACCURACY = 10_000  # percentile_approx's: rank error at most n / _ACCURACY
_GATHER = 50_000    # a column with at most this many values is brought to the driver whole


def summarize(frame: DataFrame, columns: dict[str, tuple[float, ...]], aggs: list | tuple = (),
              counts: dict[str, int] | None = None) -> tuple[Any, dict[str, list[float] | None]]:
    """`aggs` over `frame` and the exact quantiles of each column's non-null values (probabilities by
    column), linearly interpolated between ranks (numpy's and DuckDB's quantile_cont definition):
    two passes over the frame whatever the number of columns, instead of Spark's `percentile`, which
    counts every distinct value in one buffer (5 s for a million latencies on two cores).

    Pass 1 computes `aggs`, each column's count and approximate quantiles just below and above each
    wanted one (rank error <= n/_ACCURACY, so the exact value lies between them); pass 2 counts the
    values below each bracket and brings the few values inside it to the driver (a small column:
    all its values). When `counts` already says that every column is small, one pass does it all.
    Returns pass 1's row and {column: quantiles, None when it has no value}."""
    if counts is not None and all(counts.get(c, _GATHER + 1) <= _GATHER for c in columns):
        row = frame.agg(*aggs, *(F.count(c).alias(f"_n_{c}") for c in columns),
                        *(F.sort_array(F.collect_list(c)).alias(f"_all_{c}") for c in columns)).first()
        return row, {c: [_between(row[f"_all_{c}"], *_rank(row[f"_n_{c}"], p)) for p in probs]
                     if row[f"_n_{c}"] else None for c, probs in columns.items()}
    margin = 2.0 / _ACCURACY
    edges = {c: sorted({min(1.0, max(0.0, p + d)) for p in probs for d in (-margin, margin)})
             for c, probs in columns.items()}
    first = frame.agg(*aggs, *(F.count(c).alias(f"_n_{c}") for c in columns),
                      *(F.percentile_approx(c, edges[c], _ACCURACY).alias(f"_approx_{c}") for c in columns)).first()
    second = []
    for c, probs in columns.items():
        col = F.col(c)
        if first[f"_n_{c}"] <= _GATHER:
            second.append(F.sort_array(F.collect_list(col)).alias(f"_all_{c}"))
            continue
        approx = dict(zip(edges[c], first[f"_approx_{c}"]))
        for i, p in enumerate(probs):
            lo, hi = approx[min(1.0, max(0.0, p - margin))], approx[min(1.0, max(0.0, p + margin))]
            second += [F.count_if(col < lo).alias(f"_below_{c}_{i}"),
                       F.sort_array(F.collect_list(F.when((col >= lo) & (col <= hi), col))).alias(f"_band_{c}_{i}")]
    row = frame.agg(*second).first() if any(first[f"_n_{c}"] for c in columns) else None
    out: dict[str, list[float] | None] = {}
    for c, probs in columns.items():
        n = first[f"_n_{c}"]
        if not n:
            out[c] = None
        elif n <= _GATHER:
            out[c] = [_between(row[f"_all_{c}"], *_rank(n, p)) for p in probs]
        else:
            out[c] = _from_bands(frame, c, probs, n, row)
    return first, out


def _from_bands(frame: DataFrame, column: str, probs: tuple[float, ...], n: int, row: Any) -> list[float]:
    out = []
    for i, p in enumerate(probs):
        first, frac = _rank(n, p)
        band, below = row[f"_band_{column}_{i}"], row[f"_below_{column}_{i}"]
        k = first - below
        if not (0 <= k and k + (1 if frac else 0) < len(band)):  # the bracket missed: never expected
            return list(frame.agg(F.percentile(column, list(probs))).first()[0])
        out.append(_between(band, k, frac))
    return out


def _rank(n: int, p: float) -> tuple[int, float]:
    """The rule's position of quantile p among n sorted values: index and fraction towards the next."""
    pos = (n - 1) * p
    return int(math.floor(pos)), pos - math.floor(pos)


def _between(ordered: list[float], k: int, frac: float) -> float:
    return ordered[k] + (ordered[k + 1] - ordered[k]) * frac if frac else ordered[k]


def small_quantiles(values: list[float], probs: tuple[float, ...]) -> list[float] | None:
    """The same rule on values already at the driver (a per-topic or per-subscriber column)."""
    ordered = sorted(v for v in values if v is not None)
    return [_between(ordered, *_rank(len(ordered), p)) for p in probs] if ordered else None


def quantiles(frame: DataFrame, column: str, probs: tuple[float, ...]) -> list[float] | None:
    """The quantiles of a column's non-null values by peerlab's one rule (`summarize`); None when it
    has no value."""
    return summarize(frame, {column: probs})[1][column]


def group_quantile(column: str, p: float):
    """The same rule inside a groupBy: Spark's exact `percentile` (linear interpolation), for the
    per-topic and per-subscriber tables, whose groups are small."""
    return F.percentile(column, p)


def latency_stats(dl: DataFrame, delivered: int | None = None) -> dict[str, float | None]:
    """Exact p50/p90/p99, mean, max, min and count of the delivery latencies; `delivered`, when
    known, is how many there are (one pass instead of two for a small run)."""
    lat = F.col("latency_ms")
    row, q = summarize(dl, {"latency_ms": QUANTILES},
                       [F.mean(lat).alias("mean"), F.max(lat).alias("max"), F.min(lat).alias("min")],
                       None if delivered is None else {"latency_ms": delivered})
    p50, p90, p99 = q["latency_ms"] or (None, None, None)
    return {"p50": p50, "p90": p90, "p99": p99, "mean": row["mean"], "max": row["max"], "min": row["min"],
            "count": row["_n_latency_ms"]}


def _coverage_aggs(points: tuple[int, ...]) -> list:
    aggs = []
    for x in points:
        aggs += [F.mean(f"L{x}").alias(f"L{x}"), F.stddev(f"L{x}").alias(f"L{x}_sd"),
                 F.count(f"L{x}").alias(f"L{x}_n")]
    return aggs


def _coverage(row: Any, points: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {f"L{x}": row[f"L{x}"] for x in points}
    out["deviation"] = {f"L{x}": row[f"L{x}_sd"] for x in points}
    out["messages_reaching"] = {f"L{x}": row[f"L{x}_n"] for x in points}
    return out


def coverage_summary(msgs: DataFrame, points: tuple[int, ...] = COVERAGE_POINTS) -> dict[str, Any]:
    """Mean and deviation over messages of each L_x, and how many messages reached x% at all."""
    return _coverage(msgs.agg(*_coverage_aggs(points)).first(), points)


def message_summary(msgs: DataFrame) -> dict[str, Any]:
    """The per-message frame in one pass: how many messages had receivers, the delivery ratio over
    all expected receipts, and the coverage summary."""
    row = msgs.agg(F.count("*").alias("n"), F.sum("delivered").alias("d"), F.sum("expected").alias("e"),
                   *_coverage_aggs(COVERAGE_POINTS)).first()
    return {"messages": row["n"], "delivery_ratio": row["d"] / row["e"] if row["e"] else None,
            "coverage_latency_ms": _coverage(row, COVERAGE_POINTS), "delivered": row["d"] or 0}


def traffic(per_node_rows: list[dict[str, Any]]) -> dict[str, int]:
    """Duplicates received and bytes sent (data = message payloads, control = the rest), from the
    per-node totals (analysis/per_node.py)."""
    total, data = Tr.total(per_node_rows, "sent_bytes"), Tr.total(per_node_rows, "sent_data_bytes")
    return {"duplicates": Tr.total(per_node_rows, "duplicates"), "data_sent": data,
            "control_sent": total - data, "total_sent": total}


def duplicates_per_node(traffic_totals: dict[str, int], nodes: int) -> float:
    return traffic_totals["duplicates"] / nodes if nodes else math.nan


def bytes_sent(traffic_totals: dict[str, int]) -> dict[str, int]:
    return {k: traffic_totals[k] for k in ("data_sent", "control_sent", "total_sent")}


def core_metrics(events: DataFrame, subs: DataFrame, nodes: int) -> dict[str, Any]:
    """The metrics every report starts with, from events and planned subscriptions alone (what
    `peerlab bench analysis` times; analysis.duck computes the same with DuckDB). The per-node pass
    runs beside the per-message summary, as in a report (analysis/run_data.py `read`)."""
    pubs = publishes(events)
    dl = deliveries(events, expected_receivers(pubs, subs)).cache()
    msgs = per_message(dl).cache()
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="per-node") as pool:
            per_node_rows = pool.submit(lambda: [r.asDict() for r in node_totals(events, 0, None).collect()])
            summary = message_summary(msgs)
            totals = traffic(per_node_rows.result())
        return {"messages": summary["messages"], "delivery_ratio": summary["delivery_ratio"],
                "coverage_latency_ms": summary["coverage_latency_ms"],
                "latency_ms": latency_stats(dl, summary["delivered"]),
                "duplicates_per_node": duplicates_per_node(totals, nodes), "bytes": bytes_sent(totals)}
    finally:
        msgs.unpersist()
        dl.unpersist()
