"""Reading a run: the manifest, and the event logs as one typed DataFrame.

The logs are converted once into the Parquet table analysis/tables/events (clock offsets applied,
as many files as the run's size calls for) by Arrow's JSON reader, which is several times faster
than Spark's JSON source on these machines (0.9 M events: 6 s against 17 s on 2 cores), and every
metric reads that table with Spark. A later `peerlab report` on the same run reads the table
without parsing the logs again, unless the logs or the manifest's clock offsets changed
(`_source.json` beside the table records both).

A line that is not an event (not JSON, a field of the wrong type, cut short by a crash or a full
disk) costs that line, not the run: it is left out and named (log, line, problem) in metrics.json's
`ingest` section. A log whose compressed stream ends early keeps every complete line before the end.

The schema is built from `node/events.schema.json`, the same file the node checks its events
against, so a field the node writes is a column here with the same type.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from analysis.spark import local_frame, partitions_for
from node.eventlog import load_schema
from node.protocols.content.predicates import subscription_times

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


def event_logs(run_dir: Path) -> list[Path]:
    logs = sorted((run_dir / "events").glob("*.jsonl.gz"))
    if not logs:
        raise FileNotFoundError(f"{run_dir}/events holds no event logs (*.jsonl.gz)")
    return logs


def logs_bytes(run_dir: Path) -> int:
    """The compressed size of a run's event logs: what sizes the analysis (JIT tier, partitions)."""
    return sum(p.stat().st_size for p in event_logs(run_dir))


def refresh_events_table(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Convert the logs into analysis/tables/events (partitioned by run) when the table is missing or
    stale; Arrow only, so it can run while the Spark session starts. Returns what the conversion
    found: {"converted": bool, "events": n, "dropped": n, "problems": [...]}."""
    table = run_dir / "analysis" / "tables" / "events"
    source = _source(run_dir, manifest)
    stamp = table / "_source.json"
    found = json.loads(stamp.read_text()) if stamp.exists() else {}
    if found.get("source") == source:
        return {**found, "converted": False}
    files = partitions_for(logs_bytes(run_dir), os.cpu_count() or 1)
    found = {"source": source, **convert_logs(run_dir, manifest, table, files)}
    stamp.write_text(json.dumps(found))
    return {**found, "converted": True}


def events_table(spark: SparkSession, run_dir: Path, manifest: dict[str, Any],
                 refreshed: dict[str, Any] | None = None) -> tuple[DataFrame, dict[str, Any]]:
    """The run's events (without the `run` column) and what refreshing the table found (`refreshed`:
    when that was done already)."""
    found = refreshed if refreshed is not None else refresh_events_table(run_dir, manifest)
    return read_events(spark, run_dir / "analysis" / "tables" / "events").drop("run"), found


@dataclass(frozen=True)
class RemoteRun:
    """A run whose logs stay in an object store: Spark reads them and writes the tables there through
    s3a (analysis/s3a.py); only the manifest and the analysis's own files are local."""
    url: str          # s3a://bucket/prefix/<run id>
    logs_bytes: int   # the logs' compressed size, which sizes the analysis
    nodes: tuple[str, ...] = ()  # the nodes that have a log there
    log_sizes: dict[str, int] | None = None  # each log's name (n0.jsonl.gz) and size in the store
    table_stamp: dict[str, Any] | None = None  # the stored events table's _source.json, when it is whole

    def table_current(self, manifest: dict[str, Any]) -> bool:
        """Was the stored events table made from exactly these logs (names and sizes), with the
        manifest's clock offsets and this event schema? Then the report reads it, not the logs."""
        stamp = (self.table_stamp or {}).get("source")
        if not stamp or self.log_sizes is None:
            return False
        return (sorted([name, size] for name, size, *_ in stamp.get("logs", [])) == sorted(
                    [name, size] for name, size in self.log_sizes.items())
                and stamp.get("offsets_ns") == ((manifest.get("clock") or {}).get("offsets_ns") or {})
                and stamp.get("schema") == _schema_fields())


def ingest_remote(spark: SparkSession, remote: RemoteRun, manifest: dict[str, Any],
                  run_dir: Path | None = None) -> tuple[DataFrame, dict[str, Any]]:
    """The run's events where they lie (no local copy): from the events table in the store when it
    was made from these logs (compacted as the run was stored, or by an earlier report), else the
    logs read by Spark, clock offsets applied, written as the events table beside them (partitioned by
    run, as locally) and read back from it, its stamp left in `run_dir`'s analysis/tables/events for
    the upload that follows the report. A line that is not an event counts as dropped (Spark's reader
    does not say which line it was)."""
    table = f"{remote.url}/analysis/tables/events"
    if remote.table_current(manifest):
        found = {k: v for k, v in remote.table_stamp.items() if k not in ("source", "files")}  # type: ignore[union-attr]
        return read_events(spark, table).drop("run"), {**found, "converted": False}
    raw = spark.read.schema(event_struct()).json(f"{remote.url}/events/*.jsonl.gz")
    good = raw.filter(F.col("type").isNotNull() & F.col("node").isNotNull() & F.col("ts").isNotNull())
    offsets = {n: int(o) for n, o in (((manifest.get("clock") or {}).get("offsets_ns")) or {}).items() if o}
    if offsets:
        shift = F.create_map(*[F.lit(x) for node, off in offsets.items() for x in (node, off)])
        good = good.withColumn("ts", F.col("ts") - F.coalesce(shift[F.col("node")], F.lit(0)))
    good.withColumn("run", F.lit(manifest["run_id"])).write.mode("overwrite").partitionBy("run").parquet(table)
    events = read_events(spark, table)
    kept = events.count()
    found = {"events": kept, "dropped": raw.count() - kept, "problems": []}
    if run_dir is not None and remote.log_sizes is not None:
        # the stamp goes up with the report (its upload); no other file of a local table may go with it
        local = run_dir / "analysis" / "tables" / "events"
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True)
        source = {"logs": [[name, size, 0] for name, size in sorted(remote.log_sizes.items())],
                  "offsets_ns": (manifest.get("clock") or {}).get("offsets_ns") or {}, "schema": _schema_fields()}
        files = sorted(f.removeprefix(table + "/") for f in events.inputFiles())
        (local / "_source.json").write_text(json.dumps({"source": source, **found, "files": files}))
    return events.drop("run"), {**found, "converted": True}


def read_events(spark: SparkSession, table: Path | str) -> DataFrame:
    """An events table (partitioned by run). The schema is given: Spark need not open the files'
    footers to learn it (a job of its own, of one task per file past 32 files)."""
    return spark.read.schema(event_struct().add("run", T.StringType())).parquet(str(table))


ROW_GROUP_ROWS = 1_000_000  # events per row group of the events table (a few hundred MB of Arrow at most)
PARSED_AT_ONCE = 8  # logs parsed side by side while converting, whatever the machine's cores
PROBLEMS_LISTED = 20  # lines named in metrics.json; the count covers them all


def convert_logs(run_dir: Path, manifest: dict[str, Any], table: Path, files: int) -> dict[str, Any]:
    """Every log into `table`/run=<run id>/ as at most `files` Parquet files, clock offsets applied; what it
    found, and the files' paths in the table (the stamp names them: a table in a store is trusted only
    if it holds exactly those). Streamed with bounded memory: a few logs parsed at a time (side by
    side), written as row groups of at most ROW_GROUP_ROWS events, the logs shared out among the files
    by their compressed size; a run larger than the machine's memory converts as a small one does."""
    offsets = {n: int(o) for n, o in (((manifest.get("clock") or {}).get("offsets_ns")) or {}).items() if o}
    logs = event_logs(run_dir)
    shutil.rmtree(table, ignore_errors=True)
    part = table / f"run={manifest['run_id']}"
    part.mkdir(parents=True)
    sizes = [p.stat().st_size for p in logs]
    per_file = max(1, -(-sum(sizes) // max(1, files)))
    out = _PartFiles(part)
    problems: list[dict[str, Any]] = []
    window = min(PARSED_AT_ONCE, 2 * len(os.sched_getaffinity(0)))
    done_bytes = 0
    try:
        with ThreadPoolExecutor(window) as pool:  # inflating and parsing release the GIL
            for first in range(0, len(logs), window):
                for size, (events, found) in zip(sizes[first:first + window],
                                                 pool.map(read_log, logs[first:first + window])):
                    problems += found
                    out.add(correct_clocks(events, offsets), done_bytes // per_file)
                    done_bytes += size
        written = out.close()
    except BaseException:
        out.abandon()
        raise
    return {"events": out.rows, "dropped": len(problems), "problems": problems[:PROBLEMS_LISTED], "files": written}


class _PartFiles:
    """The table's part files, written in order: events buffered up to ROW_GROUP_ROWS, then a row group
    of the current file; a new file when `add` names the next one. At least one file (empty for a run
    without events), as Spark expects of a table."""

    def __init__(self, part: Path):
        self.part, self.rows, self.index = part, 0, -1
        self.writer: pq.ParquetWriter | None = None
        self.buffer: list[pa.Table] = []
        self.buffered = 0
        self.written: list[str] = []

    def add(self, events: pa.Table, index: int) -> None:
        if self.writer is None or index > self.index:  # the next file
            self._flush()
            if self.writer is not None:
                self.writer.close()
            name = f"part-{len(self.written):05d}.parquet"
            self.writer, self.index = pq.ParquetWriter(self.part / name, event_arrow_schema()), index
            self.written.append(f"{self.part.name}/{name}")
        self.buffer.append(events.cast(event_arrow_schema()))
        self.buffered += events.num_rows
        self.rows += events.num_rows
        if self.buffered >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.buffer and self.writer is not None:
            self.writer.write_table(pa.concat_tables(self.buffer), row_group_size=ROW_GROUP_ROWS)
        self.buffer, self.buffered = [], 0

    def abandon(self) -> None:
        """A failed conversion: the open file closed (the caller's stamp is never written, so nothing
        trusts what is there)."""
        if self.writer is not None:
            self.writer.close()

    def close(self) -> list[str]:
        if self.writer is None:
            self.add(event_arrow_schema().empty_table(), 0)
        self._flush()
        assert self.writer is not None
        self.writer.close()
        return self.written


def read_log(path: Path) -> tuple[pa.Table, list[dict[str, Any]]]:
    """One node's log as an Arrow table of the event schema, and the lines left out."""
    data, complete = _inflate(path.read_bytes())
    problems: list[dict[str, Any]] = []
    if not complete:
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            problems.append({"log": path.name, "line": data.count(b"\n", 0, cut) + 1,
                             "problem": "cut short (the compressed log ends mid-line)"})
        data = data[:cut]
    options = pj.ParseOptions(explicit_schema=event_arrow_schema(), unexpected_field_behavior="ignore")
    if not data.strip():
        return event_arrow_schema().empty_table(), problems
    try:
        return pj.read_json(io.BytesIO(data), parse_options=options), problems
    except pa.ArrowInvalid:
        pass
    good = []  # a bad line somewhere: line by line, to keep every other
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            good.append(pj.read_json(io.BytesIO(line), parse_options=options))
        except pa.ArrowInvalid as e:
            problems.append({"log": path.name, "line": number, "problem": _problem(e)})
    return (pa.concat_tables(good) if good else event_arrow_schema().empty_table()), problems


def _problem(error: Exception) -> str:
    """What was wrong with a line, without echoing its content."""
    text = str(error)
    if "Failed to convert" in text or "changed from" in text:
        return "a field of the wrong type"
    return "not a JSON object"


def _inflate(raw: bytes) -> tuple[bytes, bool]:
    """A gzip file's content (every member) and whether its stream was complete."""
    out = []
    while raw:
        stream = zlib.decompressobj(zlib.MAX_WBITS | 16)
        try:
            out.append(stream.decompress(raw))
        except zlib.error:
            return b"".join(out), False
        if not stream.eof:
            return b"".join(out), False
        raw = stream.unused_data
    return b"".join(out), True


def _source(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the events table was made from: each log's name, size and time, the clock offsets and
    the event schema."""
    return {"logs": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in event_logs(run_dir)],
            "offsets_ns": ((manifest.get("clock") or {}).get("offsets_ns") or {}), "schema": _schema_fields()}


def correct_clocks(events: pa.Table, offsets_ns: dict[str, int]) -> pa.Table:
    """ts minus the node's clock offset (its clock minus the reference clock, as the backend measured
    it and wrote in the manifest's clock.offsets_ns); nodes without an offset are left as they are.
    Local runs share one clock: all offsets are 0 and nothing changes."""
    nonzero = {node: off for node, off in offsets_ns.items() if off}
    if not nonzero or not events.num_rows:
        return events
    at = pc.index_in(events.column("node"), value_set=pa.array(list(nonzero)))
    shift = pc.fill_null(pc.take(pa.array(list(nonzero.values()), pa.int64()), at), 0)
    return events.set_column(events.schema.get_field_index("ts"), "ts", pc.subtract(events.column("ts"), shift))


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
    return local_frame(spark, rows, "node string, topic string, since long")
