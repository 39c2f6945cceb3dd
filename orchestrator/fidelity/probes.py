"""RTT probes during the run: every INTERVAL_S, PAIRS planned neighbour pairs pinged the way
calibration pings them (orchestrator/run/calibrate.py), so through the same shaping as the
protocol's frames: between two of peerlab's nodes over their data connection (POST /calibrate/ping:
probe frames, which the nodes never log as protocol traffic); where either end is an adapter's node,
from probe processes in the namespaces (orchestrator/fidelity/netprobe.py), on a port of their own.
Each probe is PINGS pings; its RTT is their median, held against the plan's. A probe that fails
(a node down by the fault timeline, a partition) is not counted; a pair with an end the fault
timeline degraded (added delay on purpose) is not probed until it is restored."""
from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any, Callable, Container

from node.adapters import PEERLAB
from orchestrator.fidelity.netprobe import NamespaceProbes
from orchestrator.model.plan import RunPlan

INTERVAL_S = 5.0
PAIRS = 4
PINGS = 3
TIMEOUT_S = 5.0
PING_FRAME_BYTES = 80  # one probe frame on the wire, TCP/IP headers included (a ping and its pong: twice)


class RttProbes:
    """`client(node)`: the node's control client (peerlab's nodes); `netns`: namespace probes for
    pairs with an adapter's node; `degraded()`: the nodes whose links are degraded now."""

    def __init__(self, plan: RunPlan, client: Callable[[str], Any], netns: NamespaceProbes | None = None,
                 degraded: Callable[[], Container[str]] = frozenset):
        self.plan = plan
        self.client = client
        self.netns = netns
        self.degraded = degraded
        self.rng = random.Random(f"peerlab:{plan.seed}:fidelity-probes")
        self.edges = [(n.id, p) for n in plan.nodes if not n.absent for p in n.dial if not plan.node(p).absent]
        self.pings = 0  # sent, for the traffic they add to the links' counters

    def _peerlab(self, node_id: str) -> bool:
        return self.plan.node(node_id).implementation == PEERLAB

    async def probe(self, a: str, b: str) -> dict[str, Any] | None:
        body = {"peer": b, "count": PINGS}
        try:
            if self._peerlab(a) and self._peerlab(b):
                reply = await self.client(a).post("/calibrate/ping", body, timeout=TIMEOUT_S)
            elif self.netns is not None:
                reply = await self.netns.client(a).post("/calibrate/ping", body, timeout=TIMEOUT_S)
            else:
                return None
        except Exception:  # noqa: BLE001 - a node down or cut off: that probe is not counted
            return None
        finally:
            self.pings += PINGS
        return {"a": a, "b": b, "at_ns": time.time_ns(),
                "configured_ms": self.plan.one_way_ms(a, b) + self.plan.one_way_ms(b, a),
                "measured_ms": round(statistics.median(reply["rtt_ms"]), 3)}

    async def round(self) -> list[dict[str, Any]]:
        skip = self.degraded()
        edges = [(a, b) for a, b in self.edges if a not in skip and b not in skip]
        pairs = self.rng.sample(edges, min(PAIRS, len(edges)))
        done = await asyncio.gather(*(self.probe(a, b) for a, b in pairs))
        return [p for p in done if p is not None]

    async def every(self, interval: float, record: Callable[[dict[str, Any]], None]) -> None:
        """Probe rounds every `interval` until cancelled, each probe to `record`."""
        while True:
            started = time.monotonic()
            for p in await self.round():
                record(p)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    def traffic_bytes(self) -> int:
        return self.pings * 2 * PING_FRAME_BYTES

    async def close(self) -> None:
        if self.netns is not None:
            await self.netns.close()

