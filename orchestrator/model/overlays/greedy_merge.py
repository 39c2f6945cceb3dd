"""GM, Greedy Merge (Chockler et al. 2007): start with no edges and repeatedly add the edge that
joins the most topic components (topics both ends share whose subscribers at the two ends are still
in different components); stop when every topic is connected.

Gains only fall as components merge, so a lazy greedy is exact: candidate pairs sit in buckets by
their last known gain; the best is re-checked and taken if its gain still holds, otherwise it moves
to the bucket of its new gain. Ties go to the pair that entered its bucket first (initially the
lowest (u, v)). Per-topic union-find tracks the components.
"""
from __future__ import annotations

import numpy as np

from orchestrator.model.overlays.graph import Overlay


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        parent = self.parent
        root = parent.setdefault(x, x)
        while root != parent[root]:
            parent[root] = parent[parent[root]]
            root = parent[root]
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)
        return True


def greedy_merge(subs: list[set[int]], members: list[set[int]]) -> Overlay:
    n, topics = len(subs), len(members)
    ov = Overlay(n)
    if n < 2:
        return ov
    incidence = np.zeros((n, topics), dtype=np.int16)
    for u, ts in enumerate(subs):
        incidence[u, list(ts)] = 1
    common = incidence @ incidence.T  # shared topics per pair
    iu, iv = np.triu_indices(n, k=1)
    gains = common[iu, iv]
    del common
    keep = gains > 0
    iu, iv, gains = iu[keep], iv[keep], gains[keep]
    buckets: list[list[tuple[int, int]]] = [[] for _ in range(int(gains.max(initial=0)) + 1)]
    for g in range(1, len(buckets)):
        sel = gains == g
        buckets[g] = list(zip(iu[sel].tolist(), iv[sel].tolist()))
        buckets[g].reverse()  # pop() from the end takes the lowest (u, v) first
    del iu, iv, gains

    uf = [_UnionFind() for _ in range(topics)]
    merges_left = sum(max(0, len(m) - 1) for m in members)
    g = len(buckets) - 1
    while merges_left and g > 0:
        if not buckets[g]:
            g -= 1
            continue
        u, v = buckets[g].pop()
        shared = subs[u] & subs[v]
        gain = sum(1 for t in shared if uf[t].find(u) != uf[t].find(v))
        if gain == g:
            ov.add(u, v)
            for t in shared:
                uf[t].union(u, v)
            merges_left -= gain
        elif gain > 0:
            buckets[gain].insert(0, (u, v))  # behind the pairs already waiting there
    return ov
