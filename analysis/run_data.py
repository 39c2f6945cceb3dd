"""One run's data as the metrics see it: the events and the frames derived from them (publishes,
expected deliveries, per-message coverage, per-node totals, up intervals, per-second bandwidth...),
each computed once, when a metric first asks for it, and cached in Spark (or, when it is a handful
of rows, held at the driver) until the job ends. Metrics run side by side (analysis/registry.py):
a frame two of them ask for at once is made by the first, and the other waits for it.

May import: ingest, spark and the theme modules' pure functions (faults, metrics, per_node, traffic,
views); never registry or catalogue: the metrics consume this module (catalogue.py), it does not
import them."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import faults, per_node
from analysis import metrics as M
from analysis import traffic as Tr
from analysis import views as V
from analysis.ingest import (
    RemoteRun,
    event_logs,
    events_table,
    ingest_remote,
    load_manifest,
    logs_bytes,
    subscriptions_frame,
)
from analysis.spark import size_for

T = TypeVar("T")


class shared(Generic[T]):  # noqa: N801 - used as a decorator, like functools.cached_property
    """A cached property that is computed once even when several threads ask for it at the same time
    (functools.cached_property does not lock since Python 3.12): the first computes it, the others
    wait. One lock per property; the frames depend on each other without cycles, so waiting cannot
    go round in a circle."""

    def __init__(self, fn: Callable[[Any], T]):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.lock = threading.Lock()

    def __get__(self, obj: Any, owner: Any = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        if self.name not in obj.__dict__:
            with self.lock:
                if self.name not in obj.__dict__:
                    obj.__dict__[self.name] = self.fn(obj)
        return obj.__dict__[self.name]


class RunData:
    def __init__(self, spark: SparkSession, run_dir: Path, refreshed: dict[str, Any] | None = None,
                 remote: RemoteRun | None = None):
        """`remote`: the logs are read and the tables written in an object store (run_dir holds the
        manifest and receives the analysis's own files)."""
        self.spark = spark
        self.run_dir = run_dir
        self.remote = remote
        self.tables = f"{remote.url}/analysis/tables" if remote else str(run_dir / "analysis" / "tables")
        self.manifest: dict[str, Any] = load_manifest(run_dir)
        self.plan: dict[str, Any] = self.manifest["plan"]
        self.nodes = len(self.plan["nodes"])
        self.t0: int = self.manifest.get("t0_ns") or 0
        self._cached: list[DataFrame] = []
        self.partitions = size_for(spark, remote.logs_bytes if remote else logs_bytes(run_dir))
        # the nodes that have a log (a run stopped before collecting some has fewer than planned)
        self.log_nodes = set(remote.nodes) if remote else {p.name.removesuffix(".jsonl.gz") for p in event_logs(run_dir)}
        # what refreshing the events table found (analysis/ingest.py): given when done already
        self.ingest: dict[str, Any] = refreshed or {}

    def _keep(self, frame: DataFrame) -> DataFrame:
        self._cached.append(frame.cache())
        return frame

    def release(self) -> None:
        for frame in self._cached:
            frame.unpersist()

    def read(self) -> None:
        """The frames most metrics start from, computed side by side: the per-node pass and marks, the
        per-message summary (publishes, the expected deliveries joined with the first receipts, the
        per-message frame) and the upload per second. Each is mostly one core's work, and in a
        fresh JVM mostly waiting on code generation and the JIT, so they overlap well on two cores.
        They share no frame but the events."""
        self.events  # noqa: B018 - all read it: made once, here
        with ThreadPoolExecutor(3, thread_name_prefix="analysis-read") as pool:
            started = [pool.submit(lambda: self.message_summary), pool.submit(lambda: self.upload),
                       pool.submit(lambda: self.marks)]
            self.per_node  # noqa: B018
            for future in started:
                future.result()

    @shared
    def events(self) -> DataFrame:
        if self.remote:
            frame, self.ingest = ingest_remote(self.spark, self.remote, self.manifest, self.run_dir)
        else:
            frame, self.ingest = events_table(self.spark, self.run_dir, self.manifest, self.ingest or None)
        return frame  # not cached: the Parquet table is the cache (Spark's in-memory one cost twice the scans)

    @shared
    def node_totals(self) -> DataFrame:
        """One row per node: analysis/per_node.py."""
        return self._keep(per_node.node_totals(self.events, self.t0, self.publishing[1] if self.publishing else None))

    @shared
    def per_node(self) -> list[dict[str, Any]]:
        return [r.asDict() for r in self.node_totals.collect()]

    @shared
    def marks(self) -> list[faults.Mark]:
        return faults.marks([r.asDict() for r in per_node.mark_times(self.events).collect()])

    @shared
    def window(self) -> dict[str, Any]:
        """Where the measured messages start: analysis.measure_from after T0 (0: every message)."""
        start = float((self.manifest["scenario"].get("analysis") or {}).get("measure_from") or 0.0)
        t0 = self.manifest.get("t0_ns")
        return {"from_s": start, "from_ns": int(t0 + start * 1e9) if start and t0 else 0}

    @shared
    def refused(self) -> DataFrame:
        """The publishes an implementation refused (the message never left its node)."""
        return self._keep(M.refused(self.events))

    @shared
    def all_publishes(self) -> DataFrame:
        """The workload: the honest nodes' publishes (an attacker's flood is traffic, not workload),
        less those their implementation refused (`publishes_refused` counts them)."""
        honest = [n["id"] for n in self.plan["nodes"] if n.get("role", "honest") == "honest"]
        return self._keep(M.publishes(self.events).where(F.col("origin").isin(honest))
                          .join(self.refused.select("msg_id"), "msg_id", "left_anti"))

    @shared
    def all_deliveries(self) -> DataFrame:
        subs = subscriptions_frame(self.spark, self.manifest)
        return self._keep(M.deliveries(self.events, M.expected_receivers(self.all_publishes, subs)))

    def _measured(self, frame: DataFrame) -> DataFrame:
        start = self.window["from_ns"]
        return self._keep(frame.where(F.col("t_pub") >= start)) if start else frame

    @shared
    def publishes(self) -> DataFrame:
        return self._measured(self.all_publishes)

    @shared
    def deliveries(self) -> DataFrame:
        return self._measured(self.all_deliveries)

    @shared
    def published(self) -> dict[str, int]:
        """How many messages the honest nodes published: all, and those in the measured window."""
        start = self.window["from_ns"]
        measured = F.count_if(F.col("t_pub") >= start) if start else F.count("*")
        row = self.all_publishes.agg(F.count("*").alias("all"), measured.alias("measured")).first()
        return {"all": row["all"], "measured": row["measured"]}

    @shared
    def messages(self) -> DataFrame:
        """Per message: expected and delivered receivers, delivery ratio, coverage latencies."""
        return self._keep(M.per_message(self.deliveries))

    @shared
    def message_summary(self) -> dict[str, Any]:
        return M.message_summary(self.messages)

    @shared
    def totals(self) -> dict[str, int]:
        return M.traffic(self.per_node)

    @shared
    def intervals(self) -> faults.Intervals:
        last = {r["node"]: int(r["last_ts"]) for r in self.per_node}
        return faults.up_intervals(self.marks, last, self.manifest)

    @shared
    def deliveries_up(self) -> DataFrame:
        up = faults.intervals_frame(self.spark, self.intervals)
        return self._keep(faults.deliveries_up(self.deliveries, up, faults.window_ns(self.manifest), self.publishes))

    @shared
    def topics(self) -> DataFrame:
        return self._keep(V.per_topic(self.deliveries, self.publishes))

    @shared
    def subscribers(self) -> DataFrame:
        return self._keep(V.per_subscriber(self.deliveries))

    @shared
    def per_second(self) -> DataFrame:
        return self._keep(Tr.bandwidth(self.events, self.t0))

    @shared
    def upload(self) -> list[dict[str, Any]]:
        return Tr.upload_per_second(self.per_second)

    @shared
    def publishing(self) -> tuple[int, int] | None:
        return Tr.publishing_window(self.manifest)
