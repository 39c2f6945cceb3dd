"""An overlay (undirected graph over node indices) and its metrics: degrees, edges, and per-topic
connectivity and diameter of the subgraph induced by each topic's subscribers."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class Overlay:
    nodes: int
    edges: set[tuple[int, int]] = field(default_factory=set)  # (a, b) with a < b
    centres: dict[int, int] | None = None  # star-based algorithms: topic -> its centre
    dialer: dict[tuple[int, int], int] = field(default_factory=dict)  # edge -> the node that chose it

    def add_outgoing(self, u: int, v: int) -> None:
        """u chose v (it opens the connection): random and degree-split keep who dials."""
        if u != v:
            self.add(u, v)
            self.dialer.setdefault((u, v) if u < v else (v, u), u)

    def add(self, a: int, b: int) -> None:
        if a != b:
            self.edges.add((a, b) if a < b else (b, a))

    def adjacency(self) -> list[set[int]]:
        adj: list[set[int]] = [set() for _ in range(self.nodes)]
        for a, b in self.edges:
            adj[a].add(b)
            adj[b].add(a)
        return adj

    def degrees(self) -> list[int]:
        deg = [0] * self.nodes
        for a, b in self.edges:
            deg[a] += 1
            deg[b] += 1
        return deg


def _bfs(adj: list[set[int]], allowed: set[int], start: int) -> dict[int, int]:
    dist = {start: 0}
    queue = deque([start])
    while queue:
        x = queue.popleft()
        for y in adj[x]:
            if y in allowed and y not in dist:
                dist[y] = dist[x] + 1
                queue.append(y)
    return dist


def topic_connected(adj: list[set[int]], members: set[int]) -> bool:
    if len(members) <= 1:
        return True
    return len(_bfs(adj, members, next(iter(members)))) == len(members)


def topic_diameter(adj: list[set[int]], members: set[int]) -> float:
    """Diameter of the subgraph induced by `members` (inf if disconnected, 0 for one member)."""
    best = 0
    for start in members:
        dist = _bfs(adj, members, start)
        if len(dist) < len(members):
            return float("inf")
        best = max(best, max(dist.values()))
    return best


def overlay_metrics(ov: Overlay, members: list[set[int]], diameter: bool = False) -> dict[str, float]:
    deg = ov.degrees()
    adj = ov.adjacency()
    topics = [m for m in members if m]
    connected = sum(topic_connected(adj, m) for m in topics)
    out = {"avg_degree": 2 * len(ov.edges) / ov.nodes if ov.nodes else 0.0,
           "max_degree": float(max(deg, default=0)), "edges": float(len(ov.edges)),
           "connected_topics": connected / len(topics) if topics else 1.0}
    if diameter:
        out["max_topic_diameter"] = float(max((topic_diameter(adj, m) for m in topics), default=0))
    return out
