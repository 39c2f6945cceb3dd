"""Overlay construction: topic-connected overlays (GM, the CD family) and baselines, by name.

`build(name, subs, topics, rng, degree, groups)` returns an `Overlay`; the planner uses the same registry
for scenario topologies, `peerlab overlay` for the seed's experiments.

May import: its own modules, numpy and the standard library; nothing else of peerlab.
"""
from __future__ import annotations

import random
from typing import Callable

from orchestrator.model.overlays import baselines, stars
from orchestrator.model.overlays.graph import Overlay, overlay_metrics
from orchestrator.model.overlays.greedy_merge import greedy_merge
from orchestrator.model.overlays.interests import members_of, uniform_interest, zipf_interest
from orchestrator.model.overlays.scribe import scribe

Builder = Callable[..., Overlay]  # (subs, members, rng, degree, groups) -> Overlay

ALGORITHMS: dict[str, Builder] = {
    "gm": lambda subs, members, rng, d, g: greedy_merge(subs, members),
    "cd-oda": lambda subs, members, rng, d, g: stars.cd_oda(subs, members).overlay(),
    "cd-oda-ii": lambda subs, members, rng, d, g: stars.cd_oda_ii(subs, members).overlay(),
    "2d-oda": lambda subs, members, rng, d, g: stars.two_d_oda(subs, members).overlay(),
    "cd-max": lambda subs, members, rng, d, g: stars.cd_max(subs, members).overlay(),
    "cd-max-ref": lambda subs, members, rng, d, g: stars.refine(stars.cd_max(subs, members)).overlay(),
    "random": lambda subs, members, rng, d, g: baselines.random_outgoing(len(subs), d, rng),
    "random-at-least": lambda subs, members, rng, d, g: baselines.random_at_least(len(subs), d, rng),
    "complete": lambda subs, members, rng, d, g: baselines.complete(len(subs)),
    "degree-split": lambda subs, members, rng, d, g: baselines.degree_split(subs, members, d, rng),
    "scribe": lambda subs, members, rng, d, g: scribe(subs, members, rng, g),
}
# algorithms whose output connects every topic's subscribers by construction
TOPIC_CONNECTED = ("gm", "cd-oda", "cd-oda-ii", "2d-oda", "cd-max", "cd-max-ref", "complete")
DIAMETER_TWO = ("cd-oda", "cd-oda-ii", "2d-oda", "cd-max", "cd-max-ref")


def build(name: str, subs: list[set[int]], topics: int, rng: random.Random, degree: int = 8,
          groups: int | str = "topic") -> Overlay:
    try:
        builder = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown overlay algorithm {name!r}; known: {', '.join(ALGORITHMS)}") from None
    return builder(subs, members_of(subs, topics), rng, degree, groups)


__all__ = ["ALGORITHMS", "TOPIC_CONNECTED", "DIAMETER_TWO", "build", "Overlay", "overlay_metrics",
           "members_of", "uniform_interest", "zipf_interest"]
