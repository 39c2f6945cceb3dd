"""Latency models: the registry the scenario's `network.latency.model` names.

A model is a pydantic class with a `model` tag and a `matrix(n, rng)` method giving one-way delays in
seconds for every ordered pair, where each node was placed, and notes for the manifest (e.g. how
many pairs a measured data set lacked). Models join by decorating their class with `@register`;
the scenario schema picks them up from the registry. Measured data sets are read from paths the
scenario gives (users download them); the project ships none.
"""
from __future__ import annotations

import csv
import io
import json
import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import data_files
from .units import Duration

MAX_ONE_WAY_MS = 1e6  # a file's latency (ms); 17 minutes one way is past any network


@dataclass
class Placement:
    matrix: list[list[float]]                                  # one-way seconds, [from][to]
    per_node: dict[str, list[Any]] = field(default_factory=dict)  # e.g. {"city": [...]}, one entry per node
    notes: list[str] = field(default_factory=list)

LATENCY_MODELS: dict[str, type["LatencyModel"]] = {}


def register(cls: type["LatencyModel"]) -> type["LatencyModel"]:
    LATENCY_MODELS[cls.tag] = cls
    return cls


class LatencyModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: ClassVar[str]

    def matrix(self, n: int, rng: random.Random) -> Placement:
        """One-way latency (s) for every ordered pair, with per-node placement facts for the plan.
        Every registered model defines it."""
        raise TypeError(f"latency model {self.tag!r} defines no matrix()")


@register
class Constant(LatencyModel):
    """The same one-way latency between every pair."""

    tag: ClassVar[str] = "constant"
    model: Literal["constant"]
    one_way: Duration = Field(..., ge=0, description="one-way latency, e.g. 50ms")

    def matrix(self, n: int, rng: random.Random) -> Placement:
        return Placement([[0.0 if i == j else self.one_way for j in range(n)] for i in range(n)])


@register
class UnitSquare(LatencyModel):
    """Topiary's model: nodes placed uniformly in the unit square; one-way latency is the euclidean
    distance times `scale` (so the farthest pair, the diagonal, is about 1.41 x scale)."""

    tag: ClassVar[str] = "unit-square"
    model: Literal["unit-square"]
    scale: Duration = Field(..., gt=0, description="latency of distance 1, e.g. 100ms")
    base: Duration = Field(0.0, ge=0, description="added to every pair (local processing, last mile)")

    def matrix(self, n: int, rng: random.Random) -> Placement:
        points = [(rng.random(), rng.random()) for _ in range(n)]
        mat = [[0.0 if i == j else self.base + self.scale * math.dist(points[i], points[j])
                for j in range(n)] for i in range(n)]
        return Placement(mat, {"position": [[round(x, 6), round(y, 6)] for x, y in points]})


# Median round-trip times (ms) between WonderProxy servers grouped in 8 regions, from the 2020-07-19/20
# data set (the Topiary seed's "246 cities"; docs/protocols/topiary.md "Latency models" says how it was grouped:
# continent from the server list, Europe/Asia split at 45 E and Asia at 95 E, North America at 100 W).
# Diagonal: median RTT between two servers of the same region.
REGIONS = ("na-east", "na-west", "south-america", "europe", "africa", "asia-south", "asia-east", "oceania")
REGION_RTT_MS = (
    (34.0, 66.8, 117.9, 119.7, 211.6, 230.1, 228.5, 229.4),
    (66.8, 38.2, 158.6, 161.2, 253.8, 251.2, 186.3, 199.1),
    (117.9, 158.6, 134.2, 210.4, 286.2, 313.7, 322.9, 335.5),
    (119.7, 161.2, 210.4, 40.7, 136.9, 150.5, 253.5, 300.5),
    (211.6, 253.8, 286.2, 136.9, 177.8, 236.5, 316.6, 382.1),
    (230.1, 251.2, 313.7, 150.5, 236.5, 166.7, 203.3, 320.0),
    (228.5, 186.3, 322.9, 253.5, 316.6, 203.3, 82.7, 228.8),
    (229.4, 199.1, 335.5, 300.5, 382.1, 320.0, 228.8, 36.5),
)


@register
class Regions(LatencyModel):
    """Nodes spread over world regions (round robin over `regions`, in order); one-way latency is
    half the table's median RTT between the two regions."""

    tag: ClassVar[str] = "regions"
    model: Literal["regions"]
    regions: list[str] = Field(default_factory=lambda: list(REGIONS), min_length=1,
                               description="regions to use, of: " + ", ".join(REGIONS))

    @field_validator("regions")
    @classmethod
    def _known(cls, names: list[str]) -> list[str]:
        unknown = [r for r in names if r not in REGIONS]
        if unknown:
            raise ValueError(f"unknown regions {unknown}; known: {', '.join(REGIONS)}")
        return names

    def matrix(self, n: int, rng: random.Random) -> Placement:
        where = [REGIONS.index(self.regions[i % len(self.regions)]) for i in range(n)]
        mat = [[0.0 if i == j else REGION_RTT_MS[where[i]][where[j]] / 2000 for j in range(n)] for i in range(n)]
        return Placement(mat, {"region": [REGIONS[w] for w in where]})


# gossipsub-interop's network (libp2p/test-plans, gossipsub-interop/network_graph.py): eight regions with
# the weights its nodes are drawn by, and the one-way latency (ms) from each region to each, per direction.
INTEROP_REGION_WEIGHTS = {"australia": 290, "europe": 5599, "east_asia": 1059, "west_asia": 161, "na_east": 2894,
                          "na_west": 1240, "south_africa": 47, "south_america": 36}
_INTEROP_ORDER = ("australia", "east_asia", "europe", "na_west", "na_east", "south_america", "south_africa",
                  "west_asia")
_INTEROP_ONE_WAY_MS = (  # rows: from, columns: to, both in _INTEROP_ORDER
    (2, 110, 165, 110, 150, 190, 220, 180),
    (110, 4, 125, 100, 140, 175, 175, 110),
    (165, 125, 2, 110, 70, 140, 95, 60),
    (110, 100, 110, 2, 60, 100, 160, 150),
    (150, 140, 70, 60, 2, 100, 130, 110),
    (190, 175, 140, 100, 100, 7, 195, 145),
    (220, 175, 95, 160, 130, 190, 7, 110),
    (180, 110, 60, 150, 110, 145, 110, 5),
)
INTEROP_ONE_WAY_MS = {a: {b: float(_INTEROP_ONE_WAY_MS[i][j]) for j, b in enumerate(_INTEROP_ORDER)}
                      for i, a in enumerate(_INTEROP_ORDER)}


@register
class WeightedRegions(LatencyModel):
    """Each node placed in a region drawn by weight (seeded), one-way latency from the region table, per
    direction. The defaults are gossipsub-interop's network: its eight regions, weights and latencies."""

    tag: ClassVar[str] = "weighted-regions"
    model: Literal["weighted-regions"]
    weights: dict[str, float] = Field(default_factory=lambda: dict(INTEROP_REGION_WEIGHTS), min_length=1,
                                      description="region -> weight (nodes are drawn by these, at random)")
    one_way_ms: dict[str, dict[str, float]] = Field(
        default_factory=lambda: {a: dict(row) for a, row in INTEROP_ONE_WAY_MS.items()},
        description="from region -> to region -> one-way latency in ms (every pair of the weighted regions, "
                    "a region to itself included)")

    @field_validator("weights")
    @classmethod
    def _positive(cls, weights: dict[str, float]) -> dict[str, float]:
        if any(not (w >= 0 and math.isfinite(w)) for w in weights.values()) or not sum(weights.values()) > 0:
            raise ValueError("weights: finite numbers >= 0, not all 0")
        return weights

    def model_post_init(self, _: Any) -> None:
        for a in self.weights:
            for b in self.weights:
                value = self.one_way_ms.get(a, {}).get(b)
                if value is None or not (0 <= value < 1e6):
                    raise ValueError(f"one_way_ms: no latency from {a} to {b} (every pair of the weighted "
                                     "regions needs one, in ms, >= 0)")

    def matrix(self, n: int, rng: random.Random) -> Placement:
        names = list(self.weights)
        where = rng.choices(names, weights=[self.weights[r] for r in names], k=n)
        mat = [[0.0 if i == j else self.one_way_ms[where[i]][where[j]] / 1000 for j in range(n)] for i in range(n)]
        return Placement(mat, {"region": where})


def _csv_rows(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data_files.read_text(path))))


def _number(field: str, path: str, line: int, column: str, text: str, kind: type = float) -> Any:
    """A number from a data file; the error names the place, never the text (it may not be ours)."""
    try:
        value = kind(text)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{field}: {path} line {line}, column {column}: not a "
                         f"{'whole number' if kind is int else 'number'}") from None
    if kind is float and not math.isfinite(value):  # NaN or Infinity: JSON and float() take them
        raise ValueError(f"{field}: {path} line {line}, column {column}: not a finite number (NaN or Infinity)")
    return value


@register
class WonderProxy(LatencyModel):
    """Nodes at WonderProxy cities (the Topiary seed's real-world model): `servers` and `pings` are
    the data set's two CSV files. Each node gets a distinct city (sampled; cities are reused only
    when there are more nodes than cities); one-way latency is the pair's average RTT / 2. A pair
    measured in one direction only uses that direction; a pair never measured is filled from the
    great-circle distance with a line fitted to the measured pairs; how many were filled is noted
    in the plan."""

    tag: ClassVar[str] = "wonderproxy"
    model: Literal["wonderproxy"]
    servers: str = Field(..., description="servers CSV (id,...,latitude,longitude)")
    pings: str = Field(..., description="pings CSV (source,destination,min,avg,max,mdev; RTT in ms)")

    _check_files = field_validator("servers", "pings")(data_files.resolve_field)

    def matrix(self, n: int, rng: random.Random) -> Placement:
        cities = {}
        where = "network.latency.servers", self.servers
        for line, row in enumerate(_csv_rows(where[1]), 2):
            cities[_number(*where, line, "id", row.get("id"), int)] = (
                row.get("title") or row.get("name") or "?", _number(*where, line, "latitude", row.get("latitude")),
                _number(*where, line, "longitude", row.get("longitude")))
        rtt: dict[tuple[int, int], float] = {}
        where = "network.latency.pings", self.pings
        for line, row in enumerate(_csv_rows(where[1]), 2):
            a = _number(*where, line, "source", row.get("source"), int)
            b = _number(*where, line, "destination", row.get("destination"), int)
            if a != b and a in cities and b in cities:  # ids without a server row are dropped
                rtt[(a, b)] = _number(*where, line, "avg", row.get("avg"))
                if not 0 <= rtt[(a, b)] < 10_000:
                    raise ValueError(f"network.latency.pings: {self.pings} line {line}, column avg: an RTT in ms "
                                     "from 0 to 10000")
        ids = sorted(cities)
        if not ids:
            raise ValueError(f"network.latency.servers: {self.servers} has no server row (the columns id, latitude "
                             "and longitude of WonderProxy's servers CSV)")
        if not rtt:
            raise ValueError(f"network.latency.pings: {self.pings} has no ping between two servers of "
                             f"{self.servers} (its source and destination columns are the servers' ids)")
        chosen = rng.sample(ids, n) if n <= len(ids) else [ids[i % len(ids)] for i in range(n)]
        slope, intercept = _fit([(_km(cities[a], cities[b]), v) for (a, b), v in rtt.items()])
        mat = [[0.0] * n for _ in range(n)]
        filled, one_sided = 0, 0
        for i, a in enumerate(chosen):
            for j, b in enumerate(chosen):
                if i == j or a == b:
                    continue
                value = rtt.get((a, b))
                if value is None:
                    value = rtt.get((b, a))
                    one_sided += value is not None
                if value is None:
                    value = intercept + slope * _km(cities[a], cities[b])
                    filled += 1
                mat[i][j] = value / 2000
        notes = [f"wonderproxy: {n} nodes at {len(set(chosen))} cities of {len(ids)}; of {n * (n - 1)} "
                 f"ordered pairs {one_sided} took the reverse direction's RTT and {filled} were filled from "
                 f"distance (RTT = {intercept:.1f} ms + {slope * 1000:.2f} ms per 1000 km)"]
        return Placement(mat, {"city": [cities[c][0] for c in chosen]}, notes)


def _km(a: tuple[str, float, float], b: tuple[str, float, float]) -> float:
    """Great-circle distance between two (name, lat, lon) places."""
    la1, lo1, la2, lo2 = map(math.radians, (a[1], a[2], b[1], b[2]))
    h = math.sin((la2 - la1) / 2) ** 2 + math.cos(la1) * math.cos(la2) * math.sin((lo2 - lo1) / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(h)))


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line y = intercept + slope x (through the origin when the distances do not vary)."""
    if not points:
        return 0.0, 100.0
    xs, ys = [x for x, _ in points], [y for _, y in points]
    if max(xs) == min(xs):
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        return (mean_y / mean_x, 0.0) if mean_x else (0.0, mean_y)
    slope, intercept = statistics.linear_regression(xs, ys)
    return slope, intercept


@register
class MatrixFile(LatencyModel):
    """One-way latencies (ms) from a file: JSON (a list of rows) or CSV (one row per line, no header).
    Node i uses row/column i; the matrix must be square and at least nodes.count wide."""

    tag: ClassVar[str] = "matrix"
    model: Literal["matrix"]
    path: str = Field(..., description="JSON or CSV square matrix of one-way latencies in ms")

    _check_file = field_validator("path")(data_files.resolve_field)

    def matrix(self, n: int, rng: random.Random) -> Placement:
        field, text = "network.latency.path", data_files.read_text(self.path)
        if self.path.endswith(".json"):
            try:
                rows = json.loads(text)
            except ValueError as err:  # its message quotes no content
                raise ValueError(f"{field}: {self.path} is not JSON ({err})") from None
            except RecursionError:  # arrays nested thousands deep
                raise ValueError(f"{field}: {self.path} is not a JSON list of rows (nested too deep)") from None
            if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
                raise ValueError(f"{field}: {self.path} is not a JSON list of rows")
            rows = [[_number(field, self.path, i, str(j + 1), x) for j, x in enumerate(r)] for i, r in enumerate(rows, 1)]
        else:
            rows = [[_number(field, self.path, i, str(j + 1), x) for j, x in enumerate(line.split(","))]
                    for i, line in enumerate(text.splitlines(), 1) if line.strip()]
        size = len(rows)
        if any(len(r) != size for r in rows):
            raise ValueError(f"network.latency.path: {self.path} is not a square matrix")
        if size < n:
            raise ValueError(f"network.latency.path: {self.path} is {size} x {size}, fewer than the "
                             f"{n} nodes; give a bigger matrix or fewer nodes")
        if any(float(x) < 0 for r in rows for x in r):
            raise ValueError(f"network.latency.path: {self.path} has negative latencies")
        if any(float(x) > MAX_ONE_WAY_MS for r in rows for x in r):
            raise ValueError(f"network.latency.path: {self.path} has latencies over {MAX_ONE_WAY_MS:g} ms (one way)")
        return Placement([[0.0 if i == j else float(rows[i][j]) / 1000 for j in range(n)] for i in range(n)])
