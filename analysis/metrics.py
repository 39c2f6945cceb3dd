"""Metric jobs: pure functions from DataFrames to DataFrames or plain numbers.

Delivery is counted against expected receivers: the planned subscribers of a message's topic, the
publisher excluded. Latency is receive time minus publish time (one host clock locally; the
manifest's clock offsets apply on other backends).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analysis.registry import metric, table

if TYPE_CHECKING:
    from analysis.run_data import RunData

COVERAGE_POINTS = (15, 50, 90, 100)


def publishes(events: DataFrame) -> DataFrame:
    """One row per published message: msg_id, topic, origin, t_pub (ns), size."""
    return (events.where(F.col("type") == "publish_message")
            .groupBy("msg_id").agg(F.first("topic").alias("topic"), F.first("node").alias("origin"),
                                   F.min("ts").alias("t_pub"), F.first("size").alias("size")))


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


def delivery_ratio(msgs: DataFrame) -> float | None:
    row = msgs.agg(F.sum("delivered").alias("d"), F.sum("expected").alias("e")).first()
    return None if not row["e"] else row["d"] / row["e"]


QUANTILES = (0.5, 0.9, 0.99)
_ACCURACY = 10_000  # percentile_approx's: rank error at most n / _ACCURACY


def exact_quantiles(values: DataFrame, column: str, probs: tuple[float, ...], n: int) -> list[float]:
    """Exact quantiles of a non-null column, linearly interpolated between ranks (numpy's and
    DuckDB's quantile_cont definition), in two cheap passes instead of Spark's `percentile`, which
    counts every distinct value in one buffer (5 s for a million latencies on two cores).

    Pass 1 brackets each wanted rank between two approximate quantiles (rank error <= n/_ACCURACY);
    pass 2 counts the values below each bracket and brings the few values inside it to the driver."""
    margin = max(2.0 / _ACCURACY, 2.0 / n)
    edges = sorted({min(1.0, max(0.0, p + d)) for p in probs for d in (-margin, margin)})
    approx = dict(zip(edges, values.agg(F.percentile_approx(column, list(edges), _ACCURACY)).first()[0]))
    col = F.col(column)
    aggs = []
    for i, p in enumerate(probs):
        lo, hi = approx[min(1.0, max(0.0, p - margin))], approx[min(1.0, max(0.0, p + margin))]
        aggs += [F.count_if(col < lo).alias(f"below{i}"),
                 F.sort_array(F.collect_list(F.when((col >= lo) & (col <= hi), col))).alias(f"band{i}")]
    row = values.agg(*aggs).first()
    out = []
    for i, p in enumerate(probs):
        first, frac = _rank(n, p)
        band, below = row[f"band{i}"], row[f"below{i}"]
        k = first - below
        if not (0 <= k and k + (1 if frac else 0) < len(band)):  # the bracket missed: never expected
            return list(values.agg(F.percentile(column, list(probs))).first()[0])
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
    """The quantiles of a column's non-null values by peerlab's one rule (`exact_quantiles`: linear
    interpolation between ranks); None when it has no value."""
    got = frame.where(F.col(column).isNotNull()).select(column).cache()  # one evaluation, three passes
    try:
        n = got.count()
        return exact_quantiles(got, column, probs, n) if n else None
    finally:
        got.unpersist()


def group_quantile(column: str, p: float):
    """The same rule inside a groupBy: Spark's exact `percentile` (linear interpolation), for the
    per-topic and per-subscriber tables, whose groups are small."""
    return F.percentile(column, p)


def latency_stats(dl: DataFrame) -> dict[str, float | None]:
    got = dl.where(F.col("latency_ms").isNotNull())
    row = got.agg(F.mean("latency_ms").alias("mean"), F.max("latency_ms").alias("max"),
                  F.min("latency_ms").alias("min"), F.count("*").alias("n")).first()
    if not row["n"]:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None, "min": None, "count": 0}
    p50, p90, p99 = exact_quantiles(got, "latency_ms", QUANTILES, row["n"])
    return {"p50": p50, "p90": p90, "p99": p99, "mean": row["mean"], "max": row["max"], "min": row["min"],
            "count": row["n"]}


def coverage_summary(msgs: DataFrame, points: tuple[int, ...] = COVERAGE_POINTS) -> dict[str, Any]:
    """Mean and deviation over messages of each L_x, and how many messages reached x% at all."""
    aggs = []
    for x in points:
        aggs += [F.mean(f"L{x}").alias(f"L{x}"), F.stddev(f"L{x}").alias(f"L{x}_sd"),
                 F.count(f"L{x}").alias(f"L{x}_n")]
    row = msgs.agg(*aggs, F.count("*").alias("messages")).first()
    out: dict[str, Any] = {f"L{x}": row[f"L{x}"] for x in points}
    out["deviation"] = {f"L{x}": row[f"L{x}_sd"] for x in points}
    out["messages_reaching"] = {f"L{x}": row[f"L{x}_n"] for x in points}
    return out


def traffic(events: DataFrame) -> dict[str, int]:
    """Duplicates received and bytes sent (data = message payloads, control = the rest), in one pass."""
    send = F.col("type") == "send_rpc"
    row = events.agg(F.count_if(F.col("type") == "duplicate_message").alias("dups"),
                     F.sum(F.when(send, F.col("bytes"))).alias("total"),
                     F.sum(F.when(send, F.col("data_bytes"))).alias("data")).first()
    total, data = int(row["total"] or 0), int(row["data"] or 0)
    return {"duplicates": int(row["dups"]), "data_sent": data, "control_sent": total - data, "total_sent": total}


def duplicates_per_node(traffic_totals: dict[str, int], nodes: int) -> float:
    return traffic_totals["duplicates"] / nodes if nodes else math.nan


def bytes_sent(traffic_totals: dict[str, int]) -> dict[str, int]:
    return {k: traffic_totals[k] for k in ("data_sent", "control_sent", "total_sent")}


def bytes_per_node(events: DataFrame) -> DataFrame:
    return (events.where(F.col("type").isin("send_rpc", "recv_rpc"))
            .groupBy("node").pivot("type", ["send_rpc", "recv_rpc"]).agg(F.sum("bytes"))
            .withColumnRenamed("send_rpc", "bytes_sent").withColumnRenamed("recv_rpc", "bytes_received"))


def core_metrics(events: DataFrame, subs: DataFrame, nodes: int) -> dict[str, Any]:
    """The metrics every report starts with, from events and planned subscriptions alone (what
    `peerlab bench analysis` times; analysis.duck computes the same with DuckDB)."""
    pubs = publishes(events)
    dl = deliveries(events, expected_receivers(pubs, subs)).cache()
    msgs = per_message(dl).cache()
    totals = traffic(events)
    try:
        return {"messages": msgs.count(), "delivery_ratio": delivery_ratio(msgs),
                "latency_ms": latency_stats(dl), "coverage_latency_ms": coverage_summary(msgs),
                "duplicates_per_node": duplicates_per_node(totals, nodes), "bytes": bytes_sent(totals)}
    finally:
        msgs.unpersist()
        dl.unpersist()


# metrics.json: the run and its messages ---------------------------------------------------------
@metric("messages")
def _messages(run: RunData) -> int:
    return run.publishes.count()


@metric("window")
def _window(run: RunData) -> dict[str, Any]:
    return {"from_s": run.window["from_s"], "messages_before": run.all_publishes.count() - run.publishes.count()}


@metric("delivery_ratio")
def _delivery_ratio(run: RunData) -> float | None:
    return delivery_ratio(run.messages)


@metric("latency_ms")
def _latency_ms(run: RunData) -> dict[str, float | None]:
    return latency_stats(run.deliveries)


@metric("coverage_latency_ms")
def _coverage_latency_ms(run: RunData) -> dict[str, Any]:
    return coverage_summary(run.messages)


@metric("duplicates_per_node")
def _duplicates_per_node(run: RunData) -> float:
    return duplicates_per_node(run.totals, run.nodes)


@metric("bytes")
def _bytes(run: RunData) -> dict[str, int]:
    return bytes_sent(run.totals)


@metric("shaping")
def _shaping(run: RunData) -> dict[str, Any]:
    cal = run.manifest.get("calibration") or {}
    return {"mode": run.manifest.get("shaping", {}).get("mode"), "latency_error_pct": cal.get("latency_error_pct"),
            "bandwidth_error_pct": cal.get("bandwidth_error_pct")}


@metric("events")
def _events(run: RunData) -> int:
    return run.events.count()


@table("deliveries")
def _deliveries_table(run: RunData) -> DataFrame:
    return run.deliveries


@table("messages")
def _messages_table(run: RunData) -> DataFrame:
    return run.messages.join(run.publishes, "msg_id")


@table("bytes_per_node")
def _bytes_per_node_table(run: RunData) -> DataFrame:
    return bytes_per_node(run.events)
