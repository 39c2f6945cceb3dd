"""Baseline overlays with no topic-connectivity guarantee of their own (except complete):
random (d outgoing per node, or a given number of edges), complete, and the per-topic degree split
(a GossipSub-style allocation: a node's d outgoing links split across its topics, at least one each).
"""
from __future__ import annotations

import random

from orchestrator.model.overlays.graph import Overlay


def random_outgoing(n: int, degree: int, rng: random.Random) -> Overlay:
    """Each node opens `degree` new links to random others it is not linked with yet (Topiary's
    random graph: d outgoing per node, so n x d edges when n is large enough)."""
    ov = Overlay(n)
    linked: list[set[int]] = [set() for _ in range(n)]
    for u in range(n):
        others = [v for v in range(n) if v != u and v not in linked[u]]
        for v in rng.sample(others, min(degree, len(others))):
            ov.add_outgoing(u, v)
            linked[u].add(v)
            linked[v].add(u)
    return ov


def random_at_least(n: int, degree: int, rng: random.Random) -> Overlay:
    """Each node in turn opens links to random others until it has `degree` links, counting those others
    opened to it (gossipsub-interop's random_network_mesh: every node ends with at least `degree`, on
    average a little more; the later nodes dial fewer)."""
    ov = Overlay(n)
    linked: list[set[int]] = [set() for _ in range(n)]
    degree = min(degree, n - 1)
    for u in range(n):
        while len(linked[u]) < degree:
            v = rng.randrange(n)
            if v != u and v not in linked[u]:
                ov.add_outgoing(u, v)
                linked[u].add(v)
                linked[v].add(u)
    return ov


def random_edges(n: int, edges: int, rng: random.Random) -> Overlay:
    """A uniformly random graph with exactly `edges` edges (G(n, m))."""
    ov = Overlay(n)
    edges = min(edges, n * (n - 1) // 2)
    while len(ov.edges) < edges:
        a, b = rng.randrange(n), rng.randrange(n)
        ov.add(a, b)
    return ov


def complete(n: int) -> Overlay:
    ov = Overlay(n)
    ov.edges = {(a, b) for a in range(n) for b in range(a + 1, n)}
    return ov


def degree_split(subs: list[set[int]], members: list[set[int]], degree: int, rng: random.Random) -> Overlay:
    """Node u gives each of its topics max(1, degree // |topics of u|) links to random other
    subscribers of that topic."""
    ov = Overlay(len(subs))
    for u, ts in enumerate(subs):
        if not ts:
            continue
        per_topic = max(1, degree // len(ts))
        for t in sorted(ts):
            others = sorted(members[t] - {u})
            for v in rng.sample(others, min(per_topic, len(others))):
                ov.add_outgoing(u, v)
    return ov
