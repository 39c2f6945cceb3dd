"""Per-epoch analysis of the overlay protocols (Topiary and its baselines), the seed's measures:
1. interested-message receive rate (per message: share of its honest subscribers that got it;
   averaged over the messages of the epoch), 2. average propagation delay of those deliveries,
3. average neighbour score (Topiary's kept-subset score at each node's epoch end), plus, when the
scenario has attackers, the victim topic's rate and delay and the share of honest nodes'
outgoing connections held by attackers (seed section V-D).

Epochs here are windows of publish time of equal width from the first publish (analysis.epoch_window,
else topiary's epoch length, else 10 s), so a baseline without epochs gets the same curves to be
compared with (`peerlab compare --plot`). `converged` averages the last `CONVERGED_WINDOWS` windows.
"""
from __future__ import annotations

import math
from typing import Any

from pyspark.sql import functions as F

from analysis.extras.registration import ExtraResult, RunFrames, register
from analysis.report import series_plot
from node.protocols import PROTOCOLS
from node.protocols.overlays.static import StaticOverlay

CONVERGED_WINDOWS = 5
# every registered core that is a static overlay (Topiary and the baselines): one added there is analysed here
OVERLAY_PROTOCOLS = tuple(sorted(name for name, core in PROTOCOLS.items() if issubclass(core, StaticOverlay)))


def epoch_width(manifest: dict[str, Any]) -> float:
    window = (manifest["scenario"].get("analysis") or {}).get("epoch_window")
    if window:
        return float(window)
    params = manifest["plan"]["nodes"][0]["params"] if manifest["plan"]["nodes"] else {}
    return float(params.get("epoch") or 10.0)


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else None


def outgoing_share(events: list[tuple[int, str, str, str, bool]], attackers: set[str], honest: set[str],
                   edges_ns: list[int]) -> list[float | None]:
    """Share of honest nodes' outgoing connections held by attackers at each time in `edges_ns`.
    `events` are (ts, node, type, peer, outbound) connect/disconnect rows, in time order."""
    out: dict[str, set[str]] = {n: set() for n in honest}
    shares: list[float | None] = []
    i = 0
    for edge in edges_ns:
        while i < len(events) and events[i][0] <= edge:
            ts, node, kind, peer, outbound = events[i]
            if node in out:
                if kind == "connect" and outbound:
                    out[node].add(peer)
                elif kind == "disconnect":
                    out[node].discard(peer)
            i += 1
        total = sum(len(s) for s in out.values())
        shares.append(sum(len(s & attackers) for s in out.values()) / total if total else None)
    return shares


@register(*OVERLAY_PROTOCOLS, columns=[
    ("converged_receive_rate", lambda p: p["converged"]["receive_rate"]),
    ("converged_delay_ms", lambda p: p["converged"]["delay_ms"]),
    ("first_epoch_delay_ms", lambda p: p["per_epoch"]["delay_ms"][0] if p["per_epoch"]["delay_ms"] else None),
    ("victim_receive_rate", lambda p: p["converged"].get("victim_receive_rate")),
    ("attacker_slot_share", lambda p: p["converged"].get("attacker_slot_share")),
])
def overlay_epochs(run: RunFrames) -> ExtraResult:
    manifest = run.manifest
    plan = manifest["plan"]
    width = epoch_width(manifest)
    origin = manifest.get("t0_ns", 0) + int(plan["warmup"] * 1e9)
    windows = max(1, math.ceil(plan["duration"] / width - 1e-9))
    per_msg = (run.all_deliveries.groupBy("msg_id")
               .agg(F.count("*").alias("expected"), F.count("t_recv").alias("delivered"),
                    F.sum("latency_ms").alias("latency_sum"))
               .join(run.all_publishes.select("msg_id", "topic", "t_pub"), "msg_id")
               .withColumn("epoch", F.floor((F.col("t_pub") - F.lit(origin)) / F.lit(width * 1e9)).cast("int"))
               .toPandas())
    victims = {n["behaviour"]["topic"] for n in plan["nodes"] if n.get("behaviour", {}).get("topic")}

    def series(rows) -> tuple[list[float | None], list[float | None]]:
        rate, delay = [], []
        for k in range(windows):
            w = rows[rows["epoch"] == k]
            rate.append(float((w["delivered"] / w["expected"]).mean()) if len(w) else None)
            got = w["delivered"].sum()
            delay.append(float(w["latency_sum"].sum() / got) if got else None)
        return rate, delay

    rate, delay = series(per_msg)
    per_epoch: dict[str, Any] = {"width_s": width, "receive_rate": rate, "delay_ms": delay}
    if victims:
        per_epoch["victim_receive_rate"], per_epoch["victim_delay_ms"] = series(
            per_msg[per_msg["topic"].isin(sorted(victims))])

    scores = (run.events.where(F.col("type") == "topiary_epoch")
              .select("ts", "node", "epoch", "score", "cover_miss", "delay_rel", "waste", "kept", "explored"))
    score_rows = scores.select("ts", "score").toPandas()
    if len(score_rows):
        score_rows["k"] = ((score_rows["ts"] - origin) // int(width * 1e9)).astype(int)
        per_epoch["score"] = [_mean(list(score_rows[score_rows["k"] == k]["score"])) for k in range(windows)]

    attackers = {n["id"] for n in plan["nodes"] if n.get("role", "honest") != "honest"}
    if attackers:
        honest = {n["id"] for n in plan["nodes"]} - attackers
        conn = (run.events.where(F.col("type").isin("connect", "disconnect"))
                .select("ts", "node", "type", "peer", "outbound").orderBy("ts").collect())
        edges = [origin + int((k + 1) * width * 1e9) for k in range(windows)]
        per_epoch["attacker_slot_share"] = outgoing_share([tuple(r) for r in conn], attackers, honest, edges)

    tail = slice(-CONVERGED_WINDOWS, None)
    converged = {k: _mean(v[tail]) for k, v in per_epoch.items() if isinstance(v, list)}
    converged["windows"] = min(CONVERGED_WINDOWS, windows)
    out = {"epochs": windows, "per_epoch": per_epoch, "converged": converged,
           "epoch_events": scores.count(), "victim_topics": sorted(victims)}
    xs = list(range(windows))
    plots = {"receive rate per epoch": series_plot(xs, {"all topics": rate, **(
                 {"victim topic": per_epoch["victim_receive_rate"]} if victims else {})},
                 "epoch", "interested-message receive rate", "Receive rate per epoch"),
             "delay per epoch": series_plot(xs, {"all topics": delay, **(
                 {"victim topic": per_epoch["victim_delay_ms"]} if victims else {})},
                 "epoch", "average propagation delay (ms)", "Delay per epoch")}
    return out, {"overlay_epochs": scores}, plots
