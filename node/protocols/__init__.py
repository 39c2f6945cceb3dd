"""Registry of protocol cores by scenario name; the orchestrator validates `protocol.params` with it.

May import: node.identity (keys and peer ids, for signatures) and its own modules; nothing of the
drivers (node.process, node.simulated) nor of orchestrator or analysis: the cores are sans-IO. Among
its packages, base.py is the bottom: content/ imports none of them; pubsub/ base; gossipsub/ and
overlays/ base and pubsub/; topiary/ overlays/; dht/ base and content/; pulsarcast/ base and dht/;
scoutsubs/ dht/ and content/; fastdelivery/ base, dht/ and content/.
"""
from __future__ import annotations

from node.protocols.base import Params, ProtocolCore, ProtocolIO, Unsupported
from node.protocols.fastdelivery.core import FastDelivery
from node.protocols.floodsub import FloodSub
from node.protocols.gossipsub.core import GossipSub
from node.protocols.overlays.baselines import BASELINES
from node.protocols.overlays.static import StaticOverlay
from node.protocols.pulsarcast.core import PulsarCast
from node.protocols.scoutsubs.core import ScoutSubs
from node.protocols.topiary.core import Topiary

PROTOCOLS: dict[str, type[ProtocolCore]] = {
    core.name: core for core in (FloodSub, GossipSub, StaticOverlay, Topiary, PulsarCast, ScoutSubs,
                                       FastDelivery, *BASELINES)}


def get_protocol(name: str) -> type[ProtocolCore]:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join(sorted(PROTOCOLS))}") from None


__all__ = ["PROTOCOLS", "get_protocol", "Params", "ProtocolCore", "ProtocolIO", "Unsupported"]
