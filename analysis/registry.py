"""The metrics of metrics.json, registered by name: a metric is a function of the run's data
(analysis/run_data.py) that returns its section, or None to leave it out. `analysis.job` writes them
in registration order; adding a metric is one decorated function (and its test).

    @metric("median_hops")
    def median_hops(run: RunData) -> float | None: ...

Tables (Parquet under analysis/tables/) register the same way with @table."""
from __future__ import annotations

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


def compute_metrics(run: "RunData", before: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every metric in registration order, None ones left out; `before(name)` is called as each starts."""
    out: dict[str, Any] = {}
    for name, fn in METRICS.items():
        if before:
            before(name)
        value = fn(run)
        if value is not None:
            out[name] = value
    return out
