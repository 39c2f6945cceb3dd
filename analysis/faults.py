"""What the fault timeline did to a run: when each node was up, whether every planned publish is
accounted for, delivery among the nodes that were up, and each partition's effect and recovery.

A node is *up* from its `t0` event (the moment its publish schedule was armed: at T0, or after a
restart or join once it had started), or from its first connection after its (re)start if that
came later, until it left: its `stop` event, the kill the manifest records (`faults_executed`, the
time it took effect), or, for a process that died on its own, its last event. A node restarted with
its schedule armed at once (an adapter's: T0 is in its config) but no peer yet is not in the network:
what it publishes then reaches no one, whatever the protocol. Only messages published while their
publisher was up, to nodes up for the whole dissemination window of the message
(`analysis.dissemination_window` after its publication), count in `delivery_ratio_up`.

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: analysis.spark; never registry, run_data or catalogue.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.spark import local_frame

DEFAULT_WINDOW_S = 5.0
# the actions of the manifest's `faults_executed` read here: rows of the fault table
# (orchestrator/model/fault_actions.py, which analysis may not import); tests/unit/test_fault_actions.py
# holds these names and what is read of them (a kill in effect once issued, a partition's end a heal) to it
KILL, PARTITION, HEAL = "kill", "partition", "heal"
HEAL_RACE_NS = 1_000_000_000

Intervals = dict[str, list[tuple[int, int]]]  # node -> [(up_from_ns, up_to_ns)]


Mark = tuple[str, str, int]  # (node, type, ts) of a t0, stop or publish_message event


def marks(rows: list[dict[str, Any]]) -> list[Mark]:
    """The few events up intervals and accounting read (t0, stop and publish_message), from the
    (node, type, times) rows of analysis/per_node.py's `mark_times`."""
    return [(r["node"], r["type"], int(ts)) for r in rows for ts in r["times"]]


def up_intervals(marks: list[Mark], last_ts: dict[str, int], manifest: dict[str, Any]) -> Intervals:
    """Each node's up intervals, in ns (see the module docstring), from its marks and its last event."""
    kills: dict[str, list[int]] = {}
    for f in manifest.get("faults_executed") or []:
        if f.get("action") == KILL:
            kills.setdefault(f["node"], []).append(int(f["t_ns"]))
    per_node: dict[str, list[tuple[int, str]]] = {}
    for node, kind, ts in marks:
        if kind in ("t0", "stop", "start", "connect"):
            per_node.setdefault(node, []).append((ts, kind))
    for node, ts in last_ts.items():
        per_node.setdefault(node, []).append((ts, "last"))
    for node, times in kills.items():
        per_node.setdefault(node, []).extend((t, KILL) for t in times)
    out: Intervals = {}
    for node, items in per_node.items():
        last = max((t for t, kind in items if kind == "last"), default=0)
        # a node that logs no connections at all (an older log) is up from its t0 alone
        needs_link = any(kind == "connect" for _, kind in items)
        intervals, start, armed, linked = [], None, None, not needs_link
        for t, kind in sorted(items):
            if kind == "start":  # a new life: connected again only once it connects
                linked = not needs_link
            elif kind == "connect":
                linked = True
                if armed is not None and start is None:
                    start = t  # armed before it had a peer: up from its first connection
            elif kind == "t0" and start is None and armed is None:
                armed = t
                if linked:
                    start = t
            elif kind in ("stop", KILL):
                if start is not None:
                    intervals.append((start, t))
                start = armed = None
        if start is not None:  # never said goodbye: it ran to its last event (the end, or a crash)
            intervals.append((start, max(start, last)))
        out[node] = intervals
    return out


def _covers(intervals: list[tuple[int, int]], a: int, b: int) -> bool:
    """Is [a, b] inside one of the (sorted, disjoint) intervals?"""
    i = bisect_right([s for s, _ in intervals], a) - 1
    return i >= 0 and intervals[i][1] >= b


MATCH_BEFORE_NS, MATCH_AFTER_NS = 50_000_000, 2_000_000_000  # a publish logged this close to its plan


def accounting(plan: dict[str, Any], t0_ns: int | None, intervals: Intervals, marks: list[Mark]) -> dict[str, int]:
    """Every planned publish is logged (a publish_message from its publisher at its time, give or
    take the scheduling lag), or its publisher was not up at that time; `unaccounted` counts the
    ones that are neither, and must be 0."""
    publishers = {n["id"]: n["schedule"] for n in plan["nodes"] if n.get("schedule")}
    planned = sum(len(s) for s in publishers.values())
    logged_at: dict[str, list[int]] = {}
    for node, kind, ts in marks:
        if kind == "publish_message" and node in publishers:
            logged_at.setdefault(node, []).append(ts)
    logged = sum(len(v) for v in logged_at.values())
    down = unaccounted = 0
    for node, schedule in publishers.items():
        dues = sorted((t0_ns or 0) + int(offset * 1e9) for offset, _, _ in schedule)
        taken = [False] * len(dues)
        for ts in sorted(logged_at.get(node, [])):  # each publish belongs to the latest plan entry due before it
            i = bisect_right(dues, ts + MATCH_BEFORE_NS) - 1
            if i >= 0 and not taken[i] and ts - dues[i] <= MATCH_AFTER_NS:
                taken[i] = True
        for due, done in zip(dues, taken):
            if not done:
                if _covers(intervals.get(node, []), due, due):
                    unaccounted += 1
                else:
                    down += 1
    return {"published_planned": planned, "published_logged": logged, "publisher_down": down,
            "unaccounted": unaccounted}


def intervals_frame(spark: SparkSession, intervals: Intervals) -> DataFrame:
    rows = [(node, a, b) for node, spans in intervals.items() for a, b in spans]
    return local_frame(spark, rows, "receiver string, up_from long, up_to long")


def deliveries_up(dl: DataFrame, up: DataFrame, window_ns: int, pubs: DataFrame) -> DataFrame:
    """The expected deliveries of messages published while their publisher was up, whose receiver was
    up from publication to the end of the window."""
    at_pub = (dl.join(pubs.select("msg_id", "origin"), "msg_id")
              .join(up.select(F.col("receiver").alias("origin"), F.col("up_from").alias("o_from"),
                              F.col("up_to").alias("o_to")), "origin")
              .where((F.col("o_from") <= F.col("t_pub")) & (F.col("o_to") >= F.col("t_pub")))
              .select(*dl.columns).dropDuplicates(["msg_id", "receiver"]))
    joined = at_pub.join(up, "receiver").where((F.col("up_from") <= F.col("t_pub"))
                                               & (F.col("up_to") >= F.col("t_pub") + F.lit(window_ns)))
    return joined.drop("up_from", "up_to").dropDuplicates(["msg_id", "receiver"])


def ratio(dl: DataFrame) -> float | None:
    row = dl.agg(F.count("*").alias("e"), F.count("t_recv").alias("d")).first()
    return row["d"] / row["e"] if row["e"] else None


def partitions(manifest: dict[str, Any], pubs: DataFrame, dl_up: DataFrame) -> list[dict[str, Any]]:
    """Per executed partition: messages published while it held, their delivery (among receivers up)
    on the publisher's side and across (before and after the heal; `across_caught_up_s`: from the heal
    to the last of those that arrived late), and how long after the heal delivery among up
    nodes was back to 1.0 for good (`recovery_s`: from the heal to the first message from which on
    every message reached all its up receivers; null if it never did). The own-side share leaves out
    messages published in the last HEAL_RACE_NS before the heal: their deliveries race the heal (a
    message two mesh hops from a receiver, published 30 ms before it, arrives just after)."""
    executed = manifest.get("faults_executed") or []
    t0 = manifest.get("t0_ns") or 0
    cuts = [f for f in executed if f.get("action") == PARTITION]
    if not cuts:
        return []
    # a heal lifts the cut link by link from when it was issued (older manifests: when it was done)
    heals = sorted(int(f.get("issued_ns", f["t_ns"])) for f in executed if f.get("action") == HEAL)
    per_msg = (dl_up.groupBy("msg_id").agg(F.count("*").alias("e"), F.count("t_recv").alias("d"))
               .join(pubs.select("msg_id", "t_pub"), "msg_id").orderBy("t_pub").collect())
    out = []
    for cut in cuts:
        start = int(cut["t_ns"])
        heal = next((h for h in heals if h > start), None)
        end = heal if heal is not None else 1 << 62
        side = {n: i for i, g in enumerate(cut["groups"]) for n in g}
        # strictly after the cut: a message published at that very instant may have left before it
        during = (dl_up.where((F.col("t_pub") > start) & (F.col("t_pub") < end))
                  .join(pubs.select("msg_id", "origin"), "msg_id")
                  .select("msg_id", "origin", "receiver", "t_pub", "t_recv").collect())
        own = [r for r in during if side.get(r["receiver"]) == side.get(r["origin"])
               and r["t_pub"] < end - HEAL_RACE_NS]
        across = [r for r in during if side.get(r["receiver"]) != side.get(r["origin"])]
        entry: dict[str, Any] = {
            "at_s": round((start - t0) / 1e9, 3), "heal_s": round((heal - t0) / 1e9, 3) if heal else None,
            "sides": [len(g) for g in cut["groups"]],
            "messages_during": len({r["msg_id"] for r in during}),
            "own_side_delivery_before_heal": _share([r for r in own if r["t_recv"] is not None and r["t_recv"] < end], own),
            "across_delivered_before_heal": sum(1 for r in across if r["t_recv"] is not None and r["t_recv"] < end),
            "across_delivered_after_heal": sum(1 for r in across if r["t_recv"] is not None and r["t_recv"] >= end),
            "across_expected": len(across),
            "across_caught_up_s": round((max(late) - end) / 1e9, 3) if (late := [
                r["t_recv"] for r in across if r["t_recv"] is not None and r["t_recv"] >= end]) else None,
            "recovery_s": None,
        }
        if heal is not None:
            nxt = next((int(c["t_ns"]) for c in cuts if int(c["t_ns"]) > heal), 1 << 62)
            after = [r for r in per_msg if heal <= r["t_pub"] < nxt]
            good_from = None
            for r in reversed(after):
                if r["d"] < r["e"]:
                    break
                good_from = r["t_pub"]
            if good_from is not None:
                entry["recovery_s"] = round((good_from - heal) / 1e9, 3)
            entry["messages_after_heal"] = len(after)
        out.append(entry)
    return out


def _share(part: list[Any], whole: list[Any]) -> float | None:
    return len(part) / len(whole) if whole else None


def window_ns(manifest: dict[str, Any]) -> int:
    analysis = manifest["scenario"].get("analysis") or {}
    return int(float(analysis.get("dissemination_window") or DEFAULT_WINDOW_S) * 1e9)
