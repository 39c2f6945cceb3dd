"""Topiary's baselines as protocols: TTL gossip over a fixed topology the protocol's name implies
(Topiary paper, section V-A). Scenario names: random-overlay (d random outgoing
links per node), complete-overlay, degree-split (GossipSub-style: d split across a node's topics),
scribe (rendezvous trees per group; topology.groups: a number of random groups, or `topic`).

`static-overlay` is the same dissemination over whatever topology.algorithm the scenario names.
"""
from __future__ import annotations

from node.protocols.overlays.static import StaticOverlay

# protocol name -> the overlay algorithm it always runs on (orchestrator/model/overlays)
TOPOLOGIES = {
    "random-overlay": "random",
    "complete-overlay": "complete",
    "degree-split": "degree-split",
    "scribe": "scribe",
}


def _baseline(name: str, topology: str) -> type[StaticOverlay]:
    cls_name = "".join(part.capitalize() for part in name.split("-"))
    return type(cls_name, (StaticOverlay,), {"name": name, "topology": topology, "__module__": __name__,
                                             "__doc__": f"TTL gossip over the {topology} topology."})


BASELINES = tuple(_baseline(name, topology) for name, topology in TOPOLOGIES.items())
