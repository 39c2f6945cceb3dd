"""Reading a run: the manifest, and the event logs as one typed DataFrame.

The Spark schema is built from `node/events.schema.json`, the same file the node checks its events
against, so a field the node writes is a column here with the same type.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from node.eventlog import load_schema
from node.predicates import subscription_times

_SPARK_TYPES = {"long": T.LongType(), "string": T.StringType(), "boolean": T.BooleanType(),
                "double": T.DoubleType()}
_ARROW_TYPES = {"long": pa.int64(), "string": pa.string(), "boolean": pa.bool_(), "double": pa.float64()}


def _schema_fields() -> dict[str, str]:
    schema = load_schema()
    return {**schema["common"], **schema["fields"]}


def event_struct() -> T.StructType:
    return T.StructType([T.StructField(name, _SPARK_TYPES[kind], True) for name, kind in _schema_fields().items()])


def event_arrow_schema() -> pa.Schema:
    """The same columns for Arrow writers (the synthetic generator)."""
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in _schema_fields().items()])


def load_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no manifest.json: is it a peerlab run directory?")
    return json.loads(path.read_text())


def read_events(spark: SparkSession, run_dir: Path, manifest: dict[str, Any] | None = None) -> DataFrame:
    """Every node's log as one frame, timestamps on the reference clock (see correct_clocks)."""
    logs = sorted((run_dir / "events").glob("*.jsonl.gz"))
    if not logs:
        raise FileNotFoundError(f"{run_dir}/events holds no event logs (*.jsonl.gz)")
    events = spark.read.schema(event_struct()).option("mode", "DROPMALFORMED").json([str(p) for p in logs])
    offsets = ((manifest or {}).get("clock") or {}).get("offsets_ns") or {}
    return correct_clocks(events, offsets)


def correct_clocks(events: DataFrame, offsets_ns: dict[str, int]) -> DataFrame:
    """ts minus the node's clock offset (its clock minus the reference clock, as the backend measured
    it and wrote in the manifest's clock.offsets_ns); nodes without an offset are left as they are.
    Local runs share one clock: all offsets are 0 and nothing changes."""
    nonzero = {node: int(off) for node, off in offsets_ns.items() if off}
    if not nonzero:
        return events
    table = F.create_map(*[x for node, off in nonzero.items() for x in (F.lit(node), F.lit(off))])
    return events.withColumn("ts", F.col("ts") - F.coalesce(F.try_element_at(table, F.col("node")), F.lit(0)))


def subscriptions_frame(spark: SparkSession, manifest: dict[str, Any]) -> DataFrame:
    """(node, topic, since) for every planned subscription of an honest node (attackers are not
    expected to receive anything: delivery is measured among honest subscribers). `since` (unix ns)
    is when a timed subscription was made: messages published before it are not expected; 0 for
    subscriptions made at start."""
    plan = manifest["plan"]
    matching, topics = plan.get("matching", "topic"), plan.get("topics", [])
    t0 = manifest.get("t0_ns") or 0
    rows = []
    for n in plan["nodes"]:
        if n.get("role", "honest") == "honest":
            times = subscription_times(matching, topics, n["subscriptions"], n.get("late_subscriptions", []))
            rows += [(n["id"], t, int(t0 + at * 1e9) if at else 0) for t, at in times.items()]
    schema = T.StructType([T.StructField("node", T.StringType()), T.StructField("topic", T.StringType()),
                           T.StructField("since", T.LongType())])
    return spark.createDataFrame(rows, schema)
