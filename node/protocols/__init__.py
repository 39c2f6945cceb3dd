"""Registry of protocol cores by scenario name; the orchestrator validates `protocol.params` with it."""
from __future__ import annotations

from .base import Params, ProtocolCore, ProtocolIO, Unsupported
from .fastdelivery import FastDelivery
from .floodsub import FloodSub
from .gossipsub import GossipSub
from .overlay_baselines import BASELINES
from .pulsarcast import PulsarCast
from .scoutsubs import ScoutSubs
from .static_overlay import StaticOverlay
from .topiary import Topiary

PROTOCOLS: dict[str, type[ProtocolCore]] = {
    core.name: core for core in (FloodSub, GossipSub, StaticOverlay, Topiary, PulsarCast, ScoutSubs,
                                       FastDelivery, *BASELINES)}


def get_protocol(name: str) -> type[ProtocolCore]:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join(sorted(PROTOCOLS))}") from None


__all__ = ["PROTOCOLS", "get_protocol", "Params", "ProtocolCore", "ProtocolIO", "Unsupported"]
