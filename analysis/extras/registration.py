"""The registry of protocol-specific analyses (analysis/extras/): what an extra is given, what it
returns, and `register`, with which each extra module adds itself under its protocols' names."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pyspark.sql import DataFrame


@dataclass
class RunFrames:
    """What the common analysis has already computed, handed to an extra."""

    events: DataFrame
    publishes: DataFrame          # msg_id, topic, origin, t_pub, size
    deliveries: DataFrame         # msg_id, receiver, t_pub, t_recv, latency_ms
    coverage: DataFrame           # per message: msg_id, expected, delivered, delivery_ratio, L15 ... L100
    manifest: dict[str, Any]
    all_publishes: DataFrame      # the same two before the measurement window (analysis.measure_from)
    all_deliveries: DataFrame
    per_node: list[dict[str, Any]]  # one row per node of analysis/per_node.py's totals


# an extra returns (its metrics.json section, tables to write as Parquet, report plots as base64 PNG)
ExtraResult = tuple[dict[str, Any], dict[str, DataFrame], dict[str, str]]


@dataclass
class Extra:
    compute: Callable[[RunFrames], ExtraResult]
    # (header, getter on the "protocol" section of metrics.json) for `peerlab compare`
    columns: list[tuple[str, Callable[[dict[str, Any]], Any]]] = field(default_factory=list)


EXTRAS: dict[str, Extra] = {}


def register(*protocols: str, columns: list[tuple[str, Callable[[dict[str, Any]], Any]]] = ()):
    def wrap(fn: Callable[[RunFrames], ExtraResult]):
        for name in protocols:
            EXTRAS[name] = Extra(fn, list(columns))
        return fn
    return wrap


def warmup_messages(manifest: dict[str, Any], default: int) -> int:
    """How many first-published messages the latency figures skip: the scenario's
    analysis.warmup_messages, else the protocol's default."""
    value = (manifest["scenario"].get("analysis") or {}).get("warmup_messages")
    return default if value is None else value
