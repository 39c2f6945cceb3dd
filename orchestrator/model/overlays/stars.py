"""Constant-diameter overlays built from one star per topic: CD-ODA, CD-ODA-II, 2D-ODA, CD-MAX, and
the CD-MAX-Ref refinement (CD-MAX paper).

Every algorithm here picks, for each topic, a centre among its subscribers and connects the centre
to every other subscriber; the overlay is the union of the stars, so every topic's subgraph has
diameter <= 2. They differ only in how centres are chosen.

Definitions (the seed's, over the topics not yet assigned a centre, R):
- interest group of u: the other nodes sharing at least one topic of R with u; n_u its size.
- density of u: (sum over u's topics in R of their other subscribers) / n_u, i.e. how many shared
  topics one edge of u's star carries on average (the seed's formula is garbled; this is our reading).
"""
from __future__ import annotations

from orchestrator.model.overlays.graph import Overlay


class StarBuilder:
    """Centres chosen so far, the remaining topics, and the overlay's adjacency with edge
    multiplicities (how many topic stars use each edge), so centres can also be moved."""

    def __init__(self, subs: list[set[int]], members: list[set[int]]):
        self.subs = subs
        self.members = members
        self.n = len(subs)
        # topics with fewer than two subscribers need no star
        self.remaining: set[int] = {t for t, m in enumerate(members) if len(m) > 1}
        self.centre: dict[int, int] = {}
        self.adj: list[dict[int, int]] = [{} for _ in range(self.n)]

    # the seed's quantities ------------------------------------------------------------------
    def live_topics(self, u: int) -> set[int]:
        return self.subs[u] & self.remaining

    def interest_group(self, u: int) -> set[int]:
        group: set[int] = set()
        for t in self.live_topics(u):
            group |= self.members[t]
        group.discard(u)
        return group

    def density(self, u: int, group_size: int) -> float:
        if not group_size:
            return 0.0
        return sum(len(self.members[t]) - 1 for t in self.live_topics(u)) / group_size

    def degree(self, u: int) -> int:
        return len(self.adj[u])

    # stars ---------------------------------------------------------------------------------
    def _link(self, a: int, b: int, delta: int) -> None:
        for x, y in ((a, b), (b, a)):
            count = self.adj[x].get(y, 0) + delta
            if count:
                self.adj[x][y] = count
            else:
                del self.adj[x][y]

    def make_centre(self, u: int, topic: int) -> None:
        self.centre[topic] = u
        self.remaining.discard(topic)
        for v in self.members[topic]:
            if v != u:
                self._link(u, v, +1)

    def move_centre(self, topic: int, v: int) -> None:
        u = self.centre[topic]
        for w in self.members[topic]:
            if w != u:
                self._link(u, w, -1)
        self.make_centre(v, topic)

    def overlay(self) -> Overlay:
        ov = Overlay(self.n, centres=dict(self.centre))
        for a, nbrs in enumerate(self.adj):
            for b in nbrs:
                if a < b:
                    ov.edges.add((a, b))
        return ov

    def candidates(self) -> list[int]:
        return [u for u in range(self.n) if self.subs[u] & self.remaining]


def cd_max(subs: list[set[int]], members: list[set[int]]) -> StarBuilder:
    """CD-MAX (the seed's Algorithm 1): repeatedly take the node with the smallest interest group
    (ties: highest density, then lowest current degree in the overlay, then lowest id), make it the
    centre of all its remaining topics, and remove them. The third tie-break is the one the seed's
    Example 3 shows (its node 6 becomes the centre of topic 2)."""
    sb = StarBuilder(subs, members)
    while sb.remaining:
        best = None
        for u in sb.candidates():
            size = len(sb.interest_group(u))
            key = (size, -sb.density(u, size), sb.degree(u), u)
            if best is None or key < best[0]:
                best = (key, u)
        u = best[1]
        for t in sorted(sb.live_topics(u)):
            sb.make_centre(u, t)
    return sb


def cd_oda_ii(subs: list[set[int]], members: list[set[int]]) -> StarBuilder:
    """CD-ODA-II (Onus & Richa 2011): repeatedly take the node with the highest density (ties: lowest
    id), make it the centre of all its remaining topics, and remove them."""
    sb = StarBuilder(subs, members)
    while sb.remaining:
        u = min(sb.candidates(), key=lambda x: (-sb.density(x, len(sb.interest_group(x))), x))
        for t in sorted(sb.live_topics(u)):
            sb.make_centre(u, t)
    return sb


def cd_oda(subs: list[set[int]], members: list[set[int]]) -> StarBuilder:
    """CD-ODA (Onus & Richa 2011, the first variant, as we read it): repeatedly take the node
    interested in the most remaining topics (ties: highest density, lowest id), make it their
    centre, and remove them."""
    sb = StarBuilder(subs, members)
    while sb.remaining:
        u = min(sb.candidates(), key=lambda x: (-len(sb.live_topics(x)),
                                                 -sb.density(x, len(sb.interest_group(x))), x))
        for t in sorted(sb.live_topics(u)):
            sb.make_centre(u, t)
    return sb


def two_d_oda(subs: list[set[int]], members: list[set[int]]) -> StarBuilder:
    """2D-ODA (Onus & Richa 2016): repeatedly take the remaining topic with the most subscribers
    (its node density; ties: lowest id) and, among its subscribers, the node with the highest
    density (ties: lowest id); make that node the centre of that one topic and remove it."""
    sb = StarBuilder(subs, members)
    while sb.remaining:
        t = min(sb.remaining, key=lambda x: (-len(members[x]), x))
        u = min(members[t], key=lambda x: (-sb.density(x, len(sb.interest_group(x))), x))
        sb.make_centre(u, t)
    return sb


def refine(sb: StarBuilder, max_passes: int = 50) -> StarBuilder:
    """CD-MAX-Ref (the seed's Algorithm 2): for the centres in order of decreasing degree, try to hand
    each of their topics to another subscriber of that topic: the one whose degree as the new centre
    would be lowest. The move is made when both the old and the new centre end below the old
    centre's degree (the seed's test d_v + d_t < d_u - d_t is the worst case of this; counting the
    edges exactly lets more useful moves through), and no subscriber of the topic ends above the
    overlay's maximum degree (they may gain the new centre as a neighbour), so the maximum never rises. Passes repeat until none moves a
    centre, at most `max_passes` times."""
    for _ in range(max_passes):
        moved = False
        for u in sorted(set(sb.centre.values()), key=lambda x: (-sb.degree(x), x)):
            for t in sorted(t for t, c in sb.centre.items() if c == u):
                if sb.centre[t] == u and _try_move(sb, t):
                    moved = True
        if not moved:
            break
    return sb


def _try_move(sb: StarBuilder, t: int) -> bool:
    u = sb.centre[t]
    limit = sb.degree(u)
    members = sb.members[t]
    best = None
    for v in sorted(members - {u}, key=lambda x: (sb.degree(x), x)):
        if best is not None and sb.degree(v) >= best[0]:
            break  # a node's degree only grows by taking the topic: no better candidate follows
        # the new centre's neighbours: its own plus the topic's other subscribers
        new_deg = len(sb.adj[v].keys() | members) - 1
        if new_deg < limit and (best is None or new_deg < best[0]):
            best = (new_deg, v)
    if best is None:
        return False
    ceiling = max(sb.degree(x) for x in range(sb.n))
    sb.move_centre(t, best[1])
    # u must gain something (other topics may keep all its edges), and no node it touches may pass
    # the overlay's maximum (a subscriber already there could gain the new centre as a neighbour)
    if sb.degree(u) < limit and max(sb.degree(x) for x in members | {u}) <= ceiling:
        return True
    sb.move_centre(t, u)  # undo
    return False
