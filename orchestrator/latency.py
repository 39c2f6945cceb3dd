"""Latency models: the registry the scenario's `network.latency.model` names.

A model is a pydantic class with a `model` tag and a `matrix(n, rng)` method giving one-way delays in
seconds for every ordered pair. New models (regions, WonderProxy cities, matrix files) join by
decorating their class with `@register`; the scenario schema picks them up from the registry.
"""
from __future__ import annotations

import math
import random
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .units import Duration

LATENCY_MODELS: dict[str, type["LatencyModel"]] = {}


def register(cls: type["LatencyModel"]) -> type["LatencyModel"]:
    LATENCY_MODELS[cls.tag] = cls
    return cls


class LatencyModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: ClassVar[str]

    def matrix(self, n: int, rng: random.Random) -> tuple[list[list[float]], dict]:
        """One-way latency (s) for every ordered pair, plus per-node placement facts for the plan.
        Every registered model defines it."""
        raise TypeError(f"latency model {self.tag!r} defines no matrix()")


@register
class Constant(LatencyModel):
    """The same one-way latency between every pair."""

    tag: ClassVar[str] = "constant"
    model: Literal["constant"]
    one_way: Duration = Field(..., ge=0, description="one-way latency, e.g. 50ms")

    def matrix(self, n: int, rng: random.Random) -> tuple[list[list[float]], dict]:
        return [[0.0 if i == j else self.one_way for j in range(n)] for i in range(n)], {}


@register
class UnitSquare(LatencyModel):
    """Topiary's model: nodes placed uniformly in the unit square; one-way latency is the euclidean
    distance times `scale` (so the farthest pair, the diagonal, is about 1.41 x scale)."""

    tag: ClassVar[str] = "unit-square"
    model: Literal["unit-square"]
    scale: Duration = Field(..., gt=0, description="latency of distance 1, e.g. 100ms")
    base: Duration = Field(0.0, ge=0, description="added to every pair (local processing, last mile)")

    def matrix(self, n: int, rng: random.Random) -> tuple[list[list[float]], dict]:
        points = [(rng.random(), rng.random()) for _ in range(n)]
        mat = [[0.0 if i == j else self.base + self.scale * math.dist(points[i], points[j])
                for j in range(n)] for i in range(n)]
        return mat, {"position": [[round(x, 6), round(y, 6)] for x, y in points]}
