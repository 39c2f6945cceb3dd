"""GossipSub's extra analysis (the large-message seed's measures): control traffic by kind, bytes by
message type, duplicates, IDONTWANT and stagger saves, and expanding coverage latency L_x with its
deviation over messages, skipping the first published messages (the seed excludes 2 warm-up messages
from everything but bandwidth: cold TCP windows make them slow)."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis import metrics as M
from analysis.extras import ExtraResult, RunFrames, register, warmup_messages
from analysis.traffic import control_counts

SEED_WARMUP = 2


def _count_bytes(events: DataFrame, types: tuple[str, ...]) -> dict[str, int]:
    row = events.where(F.col("type").isin(*types)).agg(F.count("*").alias("n"), F.sum("size").alias("b")).first()
    return {"count": int(row["n"] or 0), "bytes": int(row["b"] or 0)}


def measured_messages(pubs: DataFrame, warmup: int) -> DataFrame:
    """msg_id of every message but the first `warmup` published (by publish time, ties by id)."""
    order = Window.orderBy("t_pub", "msg_id")
    return pubs.withColumn("_n", F.row_number().over(order)).where(F.col("_n") > warmup).select("msg_id")


@register("gossipsub", columns=[
    ("L50_ms_measured", lambda p: p["coverage_latency_ms"]["L50"]),
    ("L100_ms_measured", lambda p: p["coverage_latency_ms"]["L100"]),
    ("L100_sd_ms", lambda p: p["coverage_latency_ms"]["deviation"]["L100"]),
    ("ihave_ids", lambda p: p["control"]["ihave"]),
    ("iwant_ids", lambda p: p["control"]["iwant"]),
    ("idontwant_ids", lambda p: p["control"]["idontwant"]),
    ("idontwant_saves", lambda p: p["idontwant_saves"]["count"]),
    ("stagger_saves", lambda p: p["stagger_saves"]["count"]),
    ("duplicates", lambda p: p["duplicates"]["count"]),
])
def gossipsub_extra(run: RunFrames) -> ExtraResult:
    events = run.events
    warmup = warmup_messages(run.manifest, SEED_WARMUP)
    kept = measured_messages(run.publishes, warmup)
    cov = run.coverage.join(kept, "msg_id")
    sent = control_counts(events)
    out = {
        "warmup_messages": warmup,
        "measured_messages": kept.count(),
        "coverage_latency_ms": M.coverage_summary(cov),
        "control": sent["entries"],
        "bytes_sent_by_type": sent["bytes_by_type"],
        "duplicates": _count_bytes(events, ("duplicate_message",)),
        "idontwant_saves": _count_bytes(events, ("idontwant_skip", "stagger_skip")),
        "stagger_saves": _count_bytes(events, ("stagger_skip",)),
        "penalties": int(events.where(F.col("type") == "penalty")
                         .agg(F.sum(F.coalesce(F.col("msgs"), F.lit(1)))).first()[0] or 0),
        "rejected": events.where((F.col("type") == "reject_message")
                                 & F.col("reason").startswith("validation")).count(),
    }
    per_message = (run.coverage.join(run.publishes.select("msg_id", "t_pub", "origin", "size"), "msg_id")
                   .join(kept.withColumn("measured", F.lit(True)), "msg_id", "left")
                   .fillna(False, ["measured"]))
    return out, {"gossipsub_messages": per_message}, {}
