"""Scribe-style rendezvous trees (Castro et al. 2002), as Topiary's seed uses them for a baseline:
nodes are put in groups (one per topic, or a number of random groups), and each group builds a
multicast tree toward its rendezvous node by node id.

Model: every node gets a random 16-bit id, read as 8 base-4 digits (Pastry's b = 2). A group's key
is a hash of its name; its root is the member sharing the longest id prefix with the key (ties: the
numerically closest). Every other member joins through a member that shares one more digit with the
key than it does, the next Pastry hop (the nearest such digit count that exists; the root if none),
picked at random among those. Parents always share more of the key, so each group is a tree.
"""
from __future__ import annotations

import hashlib
import random

from orchestrator.model.overlays.graph import Overlay

DIGITS, BITS = 8, 2


def _prefix(a: int, b: int) -> int:
    for i in range(DIGITS):
        shift = (DIGITS - 1 - i) * BITS
        if (a >> shift) & 3 != (b >> shift) & 3:
            return i
    return DIGITS


def _key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:2], "big")


def tree(members: list[int], ids: list[int], key: int, rng: random.Random, ov: Overlay) -> None:
    """Add the group's rendezvous tree to `ov`."""
    if len(members) < 2:
        return
    shared = {m: _prefix(ids[m], key) for m in members}
    root = max(members, key=lambda m: (shared[m], -abs(ids[m] - key), -m))
    for m in sorted(members):
        if m == root:
            continue
        higher = sorted({shared[x] for x in members if shared[x] > shared[m] and x != root})
        hop = [x for x in members if higher and shared[x] == higher[0] and x != root]
        ov.add(m, rng.choice(sorted(hop)) if hop else root)


def scribe(subs: list[set[int]], members: list[set[int]], rng: random.Random, groups: int | str) -> Overlay:
    """groups = "topic": a tree per topic over its subscribers; an int k: nodes split at random into
    k groups of (nearly) equal size, a tree in each."""
    n = len(subs)
    ids = [rng.getrandbits(DIGITS * BITS) for _ in range(n)]
    ov = Overlay(n)
    if groups == "topic":
        for t, group in enumerate(members):
            tree(sorted(group), ids, _key(f"topic-{t}"), rng, ov)
    else:
        order = list(range(n))
        rng.shuffle(order)
        for g in range(int(groups)):
            tree(sorted(order[g::int(groups)]), ids, _key(f"group-{g}"), rng, ov)
    return ov
