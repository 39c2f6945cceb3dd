"""GossipSub's extra analysis (the large-message seed's measures): control traffic by kind, bytes by
message type, duplicates, IDONTWANT and stagger saves, and expanding coverage latency L_x with its
deviation over messages, skipping the first published messages (the seed excludes 2 warm-up messages
from everything but bandwidth: cold TCP windows make them slow); and gossipsub-interop's per-message
view of the same run (analysis/extras/dissemination.py)."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analysis import metrics as M
from analysis.extras.dissemination import dissemination
from analysis.extras.registration import ExtraResult, RunFrames, register, warmup_messages
from analysis.traffic import control_counts

SEED_WARMUP = 2


_COUNTED = {"duplicates": ("duplicate_message",), "idontwant_saves": ("idontwant_skip", "stagger_skip"),
            "stagger_saves": ("stagger_skip",)}


def _counts(events: DataFrame) -> dict[str, dict[str, int] | int]:
    """Events (and their bytes) of each kind in _COUNTED, penalties and validation rejections: one pass."""
    kind = F.col("type")
    aggs = []
    for name, types in _COUNTED.items():
        aggs += [F.count_if(kind.isin(*types)).alias(f"{name}_n"), F.sum(F.when(kind.isin(*types), F.col("size"))).alias(f"{name}_b")]
    row = events.agg(*aggs, F.sum(F.when(kind == "penalty", F.coalesce(F.col("msgs"), F.lit(1)))).alias("penalties"),
                     F.count_if((kind == "reject_message") & F.col("reason").startswith("validation")).alias("rejected")
                     ).first()
    out: dict[str, dict[str, int] | int] = {
        name: {"count": int(row[f"{name}_n"] or 0), "bytes": int(row[f"{name}_b"] or 0)} for name in _COUNTED}
    return {**out, "penalties": int(row["penalties"] or 0), "rejected": int(row["rejected"] or 0)}


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
    sent = control_counts(run.per_node)
    counts = _counts(events)
    out = {
        "warmup_messages": warmup,
        "measured_messages": kept.count(),
        "coverage_latency_ms": M.coverage_summary(cov),
        "control": sent["entries"],
        "bytes_sent_by_type": sent["bytes_by_type"],
        **{name: counts[name] for name in (*_COUNTED, "penalties", "rejected")},
    }
    per_message = (run.coverage.join(run.publishes.select("msg_id", "t_pub", "origin", "size"), "msg_id")
                   .join(kept.withColumn("measured", F.lit(True)), "msg_id", "left")
                   .fillna(False, ["measured"]))
    out["dissemination"], plots = dissemination(events, run.manifest, warmup)
    return out, {"gossipsub_messages": per_message}, plots
