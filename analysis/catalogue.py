"""Every section of metrics.json and every Parquet table of analysis/tables/: each one registered
function (analysis/registry.py) of the run's data (`RunData`, analysis/run_data.py) over the pure
functions of the theme modules, in the order metrics.json lists them (the order they register in).
`analysis.job` imports this module, which registers them all; adding a metric is one decorated
function here (its figures, when there is more to them than a line, in the module of its theme).

May import: registry, run_data (for types only) and the theme modules (faults, fidelity,
kernel_traffic, metrics, per_node, relaying, traffic, views). Those import neither registry nor
run_data: run_data (the data hub) reads them, this module reads run_data, never the other way round.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from analysis import faults, fidelity, kernel_traffic, metrics, per_node, relaying, traffic, views
from analysis.registry import metric, table

if TYPE_CHECKING:
    from analysis.run_data import RunData


# metrics.json: who was up, and what it received ----------------------------------------------------
@metric("delivery_ratio_up")
def _delivery_ratio_up(run: RunData) -> float | None:
    return faults.ratio(run.deliveries_up)


@metric("accounting")
def _accounting(run: RunData) -> dict[str, int]:
    return faults.accounting(run.plan, run.manifest.get("t0_ns"), run.intervals, run.marks)


@metric("partitions")
def _partitions(run: RunData) -> list[dict[str, Any]] | None:
    return faults.partitions(run.manifest, run.publishes, run.deliveries_up) or None


# the runner's verdict, and traffic as the kernel counted it -----------------------------------------
@metric("fidelity")
def _fidelity(run: RunData) -> dict[str, Any] | None:
    return fidelity.verdict(run.manifest)


@metric("kernel_traffic")
def _kernel_traffic(run: RunData) -> dict[str, Any] | None:
    samples = kernel_traffic.load_samples(run.run_dir)
    if not samples:
        return None
    logged = {r["node"]: int(r["sent_bytes_since_t0"] or 0) for r in run.per_node}
    return kernel_traffic.kernel_summary(samples, run.publishing, logged, run.t0)


# bandwidth, control, connections, resources --------------------------------------------------------
@metric("bandwidth")
def _bandwidth(run: RunData) -> dict[str, Any]:
    return traffic.bandwidth_summary(run.upload, run.publishing, run.t0, run.nodes)


@metric("control")
def _control(run: RunData) -> dict[str, dict[str, int]]:
    return traffic.control_counts(run.per_node)


@metric("connections")
def _connections(run: RunData) -> dict[str, Any]:
    return traffic.connections(run.per_node)


@metric("resources")
def _resources(run: RunData) -> dict[str, Any] | None:
    return traffic.resources(run.per_node)


# the run and its messages ----------------------------------------------------------------------------
@metric("messages")
def _messages(run: RunData) -> int:
    return run.published["measured"]


@metric("window")
def _window(run: RunData) -> dict[str, Any]:
    return {"from_s": run.window["from_s"], "messages_before": run.published["all"] - run.published["measured"]}


@metric("publishes_refused")
def _publishes_refused(run: RunData) -> dict[str, Any] | None:
    """Publishes the node's implementation refused (the message never left it, so no one is expected
    to get it), where there were any: how many, and the first few with the library's reason."""
    rows = run.refused.orderBy("msg_id").collect()
    if not rows:
        return None
    return {"count": len(rows), "first": [{"msg_id": r["msg_id"], "node": r["origin"], "reason": r["reason"]}
                                          for r in rows[:5]]}


@metric("delivery_ratio")
def _delivery_ratio(run: RunData) -> float | None:
    return run.message_summary["delivery_ratio"]


@metric("latency_ms")
def _latency_ms(run: RunData) -> dict[str, float | None]:
    return metrics.latency_stats(run.deliveries, run.message_summary["delivered"])


@metric("coverage_latency_ms")
def _coverage_latency_ms(run: RunData) -> dict[str, Any]:
    return run.message_summary["coverage_latency_ms"]


@metric("duplicates_per_node")
def _duplicates_per_node(run: RunData) -> float:
    return metrics.duplicates_per_node(run.totals, run.nodes)


@metric("bytes")
def _bytes(run: RunData) -> dict[str, int]:
    return metrics.bytes_sent(run.totals)


@metric("shaping")
def _shaping(run: RunData) -> dict[str, Any]:
    cal = run.manifest.get("calibration") or {}
    return {"mode": run.manifest.get("shaping", {}).get("mode"), "latency_error_pct": cal.get("latency_error_pct"),
            "bandwidth_error_pct": cal.get("bandwidth_error_pct")}


@metric("events")
def _events(run: RunData) -> int:
    return sum(r["events"] for r in run.per_node)


@metric("ingest")
def _ingest(run: RunData) -> dict[str, Any] | None:
    """What the analysis could not read, when there is something: log lines left out (not events, or
    cut short; how many, and the first ones) and planned nodes without a log (a run stopped before
    collecting them: the figures are those of the logs that are there)."""
    out: dict[str, Any] = {}
    if run.ingest.get("dropped"):
        out.update({"dropped_lines": run.ingest["dropped"], "lines": run.ingest["problems"]})
    missing = [n["id"] for n in run.plan["nodes"] if n["id"] not in run.log_nodes]
    if missing:
        out["logs_missing"] = missing
    return out or None


# how nodes relay -------------------------------------------------------------------------------------
@metric("mesh")
def _mesh(run: RunData) -> dict[str, Any] | None:
    if not any(r["mesh_changes"] for r in run.per_node):
        return None  # no GRAFT or PRUNE logged either way (the per-node pass counted them): no mesh to follow
    return relaying.mesh_summary(relaying.mesh_sizes(run.events))


@metric("relaying")
def _relaying(run: RunData) -> dict[str, Any] | None:
    return relaying.relay_summary(relaying.relays(run.events))


# spreads per topic and per subscriber, attack impact ------------------------------------------------
@metric("per_topic")
def _per_topic(run: RunData) -> dict[str, Any]:
    rows = [r.asDict() for r in run.topics.collect()]
    return {"topics": len(rows), "delivery_ratio": views.spread(rows, "delivery_ratio"),
            "p50_ms": views.spread(rows, "p50_ms")}


@metric("per_subscriber")
def _per_subscriber(run: RunData) -> dict[str, Any]:
    rows = [r.asDict() for r in run.subscribers.collect()]
    return {"subscribers": len(rows), "delivery_ratio": views.spread(rows, "delivery_ratio"),
            "p99_ms": views.spread(rows, "p99_ms")}


@metric("attack")
def _attack(run: RunData) -> dict[str, Any] | None:
    return views.attack_impact(run.deliveries, run.publishes, run.plan) or None


# the tables, in the order they are written -----------------------------------------------------------
@table("kernel_traffic")
def _kernel_traffic_table(run: RunData) -> DataFrame | None:
    return kernel_traffic.deltas_frame(run.spark, kernel_traffic.load_samples(run.run_dir), run.t0)


@table("bandwidth")
def _bandwidth_table(run: RunData) -> DataFrame:
    return run.per_second


@table("bytes_per_node")
def _bytes_per_node_table(run: RunData) -> DataFrame:
    return per_node.bytes_per_node(run.node_totals)


@table("resources")
def _resources_table(run: RunData) -> DataFrame:
    return per_node.resources_per_node(run.node_totals)


@table("deliveries")
def _deliveries_table(run: RunData) -> DataFrame:
    return run.deliveries


@table("messages")
def _messages_table(run: RunData) -> DataFrame:
    return run.messages.join(run.publishes, "msg_id")


@table("topics")
def _topics_table(run: RunData) -> DataFrame:
    return run.topics


@table("subscribers")
def _subscribers_table(run: RunData) -> DataFrame:
    return run.subscribers
