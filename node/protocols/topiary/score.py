"""Topiary's per-epoch arithmetic (Topiary paper, section IV, equations 1-10), as
pure functions over one epoch's observations, so each equation is testable on its own.

Reading of the seed where it is ambiguous :
- Every score term is a cost (the seed says "a higher score indicates poorer performance"), so the
  coverage term Fc is the fraction of expected messages the subset FAILED to relay (eq. 3 as printed
  counts the relayed ones, which would reward losing messages).
- "argmax S" in Algorithm 1 therefore means the best, i.e. the LOWEST, score.
- A subset that relays no interested message has Fd = 0 (eq. 2 divides by zero); its Fc is then 1.
- Topics with no expected message in the epoch have no per-topic score (eq. 6) and are left out of
  the exploration threshold (eq. 9).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from itertools import combinations
from typing import Iterable

INF = math.inf


@dataclass
class Observation:
    """One message received in the epoch: its topic and when each neighbour's copy arrived."""

    topic: str
    first: float                                       # T_min: first copy from any neighbour
    arrivals: dict[str, float] = field(default_factory=dict)

    def relative(self, peer: str) -> float:
        """Eq. 1: T~_u = T_u - T_min (infinite if u never sent it)."""
        at = self.arrivals.get(peer)
        return INF if at is None else at - self.first

    def best(self, subset: Iterable[str]) -> float:
        """min over u in the subset of T~_u."""
        return min((self.relative(u) for u in subset), default=INF)


@dataclass(frozen=True)
class Weights:
    coverage: float = 1.0   # w_c
    delay: float = 10.0     # w_d, per second of relative delay
    waste: float = 0.0      # w_w, per uninterested message relayed


@dataclass(frozen=True)
class Score:
    total: float
    coverage: float   # Fc: fraction of expected messages the subset did not relay
    delay: float      # Fd: mean relative delay (s) of the interested messages it relayed
    waste: int        # Fw: uninterested messages it relayed


def score(subset: Iterable[str], observations: Iterable[Observation], interests: set[str],
          expected: dict[str, float], w: Weights) -> Score:
    """Eqs. 2-5 for one subset of neighbours."""
    subset = tuple(subset)
    relayed, delay_sum, waste = 0, 0.0, 0
    for obs in observations:
        best = obs.best(subset)
        if best == INF:
            continue
        if obs.topic in interests:
            relayed += 1
            delay_sum += best
        else:
            waste += 1
    total_expected = sum(expected.get(t, 0.0) for t in interests)
    fc = 1.0 - relayed / total_expected if total_expected > 0 else 0.0
    fd = delay_sum / relayed if relayed else 0.0
    return Score(w.coverage * fc + w.delay * fd + w.waste * waste, fc, fd, waste)


def best_subset(candidates: Iterable[str], size: int, observations: list[Observation], interests: set[str],
                expected: dict[str, float], w: Weights) -> tuple[tuple[str, ...], Score]:
    """Algorithm 1, lines 15-19: the subset of `size` candidates with the lowest score (ties go to
    the lexicographically first subset, so the choice is deterministic)."""
    ordered = sorted(candidates)
    size = min(size, len(ordered))
    best: tuple[tuple[str, ...], Score] | None = None
    for subset in combinations(ordered, size):
        s = score(subset, observations, interests, expected, w)
        if best is None or s.total < best[1].total:
            best = (subset, s)
    assert best is not None  # combinations of size <= len always yields at least ()
    return best


def topic_scores(subset: Iterable[str], observations: list[Observation], interests: set[str],
                 expected: dict[str, float], w: Weights) -> dict[str, float]:
    """Eqs. 6-8: S^theta for each subscribed topic that had expected messages this epoch."""
    subset = tuple(subset)
    out = {}
    for topic in sorted(interests):
        if expected.get(topic, 0.0) <= 0:
            continue
        s = score(subset, (o for o in observations if o.topic == topic), {topic}, {topic: expected[topic]}, w)
        out[topic] = w.coverage * s.coverage + w.delay * s.delay
    return out


def underperforming(scores: dict[str, float], eta: float) -> set[str]:
    """Eq. 9: sigma_v+ = topics whose score exceeds eta times the best topic's."""
    if not scores:
        return set()
    floor = min(scores.values())
    return {t for t, s in scores.items() if s > eta * floor}


def exploration_weights(sigma_plus: set[str], directory: dict[str, frozenset[str]],
                        exclude: set[str]) -> dict[str, int]:
    """Eq. 10: omega_u = |sigma_u & sigma_v+| for every node u not excluded."""
    return {u: len(topics & sigma_plus) for u, topics in sorted(directory.items()) if u not in exclude}


def weighted_sample(weights: dict[str, float], k: int, rng: random.Random) -> list[str]:
    """Draw up to k distinct keys, each draw proportional to the remaining keys' weights; keys of
    weight 0 are never drawn."""
    pool = {u: wt for u, wt in weights.items() if wt > 0}
    out: list[str] = []
    while pool and len(out) < k:
        total = sum(pool.values())
        x = rng.random() * total
        for u in sorted(pool):
            x -= pool[u]
            if x < 0:
                break
        out.append(u)
        del pool[u]
    return out
