"""Registry of protocol cores by scenario name; the orchestrator validates `protocol.params` with it."""
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
