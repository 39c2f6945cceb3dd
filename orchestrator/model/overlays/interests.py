"""Interest generators: which node subscribes to which topic.

- uniform interest rate (Topiary's model): every node joins every topic with probability `rate`;
- Zipf popularity with subscription size (the CD-MAX seed's model): topic i (1-based) has weight
  i^-alpha, and every node draws `size` distinct topics by weight, without replacement.
"""
from __future__ import annotations

import itertools
import random


def uniform_interest(nodes: int, topics: int, rate: float, rng: random.Random) -> list[set[int]]:
    return [{t for t in range(topics) if rng.random() < rate} for _ in range(nodes)]


def zipf_interest(nodes: int, topics: int, alpha: float, size: int, rng: random.Random) -> list[set[int]]:
    if size > topics:
        raise ValueError(f"subscription size {size} exceeds the number of topics {topics}")
    weights = [1.0 / (rank + 1) ** alpha for rank in range(topics)]
    cumulative = list(itertools.accumulate(weights))  # what choices() sums on each call: the same draws, summed once
    out = []
    for _ in range(nodes):
        chosen: set[int] = set()
        draws = 0
        while len(chosen) < size and draws < REDRAWS:  # weighted sampling without replacement
            chosen.add(rng.choices(range(topics), cum_weights=cumulative)[0])
            draws += 1
        while len(chosen) < size:  # a steep alpha: the topics left are too rare to meet by redrawing
            left = [t for t in range(topics) if t not in chosen]
            mass = [weights[t] for t in left]
            chosen.add(rng.choices(left, mass)[0] if sum(mass) > 0 else rng.choice(left))
        out.append(chosen)
    return out


REDRAWS = 1000  # draws per node before sampling from the remaining topics only (same law, no redraws)


def members_of(subs: list[set[int]], topics: int) -> list[set[int]]:
    """Topic -> the nodes subscribed to it."""
    members: list[set[int]] = [set() for _ in range(topics)]
    for node, ts in enumerate(subs):
        for t in ts:
            members[t].add(node)
    return members
