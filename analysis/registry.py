"""The metrics of metrics.json, registered by name: a metric is a function of the run's data
(analysis/run_data.py) that returns its section, or None to leave it out. `analysis.job` writes them
in registration order; adding a metric is one decorated function in analysis/catalogue.py (and its
test).

    @metric("median_hops")
    def median_hops(run: RunData) -> float | None: ...

Tables (Parquet under analysis/tables/) register the same way with @table.

May import: nothing of analysis (RunData for types only). It is fed by catalogue.py, which the entry
point (job.py) imports; the data hub (run_data.py) neither imports nor owns it."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.run_data import RunData

MetricFn = Callable[["RunData"], Any]
TableFn = Callable[["RunData"], "DataFrame | None"]
METRICS: dict[str, MetricFn] = {}
TABLES: dict[str, TableFn] = {}


def metric(name: str) -> Callable[[MetricFn], MetricFn]:
    def register(fn: MetricFn) -> MetricFn:
        if name in METRICS:
            raise ValueError(f"metric {name!r} is registered twice ({METRICS[name].__module__}, {fn.__module__})")
        METRICS[name] = fn
        return fn
    return register


def table(name: str) -> Callable[[TableFn], TableFn]:
    def register(fn: TableFn) -> TableFn:
        TABLES[name] = fn
        return fn
    return register


def compute_metrics(run: "RunData", done: Callable[[str, float], None] | None = None,
                    workers: int = 1) -> dict[str, Any]:
    """Every metric, `workers` at a time, in registration order in the result, None ones left out;
    `done(name, seconds)` is called as each ends, on the thread that computed it.

    Side by side because a metric is a few small Spark jobs, each mostly fixed cost on one core
    (planning, code generation, scheduling): two at a time keep two cores busy. The frames metrics
    share are made once (analysis/run_data.py)."""
    def one(name: str, fn: MetricFn) -> Any:
        start = time.perf_counter()
        value = fn(run)
        if done:
            done(name, time.perf_counter() - start)
        return value
    with ThreadPoolExecutor(workers, thread_name_prefix="metric") as pool:
        futures = {name: pool.submit(one, name, fn) for name, fn in METRICS.items()}
        values = {name: future.result() for name, future in futures.items()}
    return {name: value for name, value in values.items() if value is not None}
