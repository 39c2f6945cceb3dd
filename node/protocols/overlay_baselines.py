"""Topiary's baselines as protocols: TTL gossip over a fixed topology the protocol's name implies
(seed: shared/seeds/topiary.txt, section V-A). Scenario names: random-overlay (d random outgoing
links per node), complete-overlay, degree-split (GossipSub-style: d split across a node's topics),
scribe (rendezvous trees per group; topology.groups: a number of random groups, or `topic`).

`static-overlay` is the same dissemination over whatever topology.algorithm the scenario names.
"""
from __future__ import annotations

from .static_overlay import StaticOverlay


class RandomOverlay(StaticOverlay):
    name = "random-overlay"
    topology = "random"


class CompleteOverlay(StaticOverlay):
    name = "complete-overlay"
    topology = "complete"


class DegreeSplit(StaticOverlay):
    name = "degree-split"
    topology = "degree-split"


class Scribe(StaticOverlay):
    name = "scribe"
    topology = "scribe"


BASELINES = (RandomOverlay, CompleteOverlay, DegreeSplit, Scribe)
