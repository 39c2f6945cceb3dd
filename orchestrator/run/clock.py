"""Clock offsets of the nodes, estimated NTP-style over the control API.

For each node, a few `GET /clock` round trips: the orchestrator notes its clock before (t1) and after
(t2) each one, the node answers its own clock (tn). With symmetric paths the node's offset is
tn - (t1 + t2) / 2, wrong by at most half the round trip; the sample with the shortest round trip is
kept. The runner sends T0 on each node's own clock (T0 + offset) and the analysis subtracts the
offsets from every timestamp (`analysis.ingest.correct_clocks`).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from orchestrator.run.node_client import ControlClient

METHOD = "NTP-style {how}: best of {n} round trips per node (error <= rtt/2)"


async def node_offset(client: ControlClient, rounds: int = 5,
                      now_ns: Callable[[], int] = time.time_ns) -> tuple[int, int]:
    """(offset_ns, rtt_ns) of one node: its clock minus ours (`now_ns`: a dilated run's experiment
    clock, which the node answers on too), from the shortest round trip."""
    best: tuple[int, int] | None = None
    for _ in range(rounds):
        t1 = now_ns()
        tn = int((await client.get("/clock"))["ns"])
        t2 = now_ns()
        rtt = t2 - t1
        if best is None or rtt < best[1]:
            best = (tn - (t1 + t2) // 2, rtt)
    assert best is not None
    return best


async def estimate(clients: dict[str, ControlClient], rounds: int = 5, how: str = "over the control API",
                   now_ns: Callable[[], int] = time.time_ns) -> dict[str, Any]:
    """The manifest's `clock` section for these nodes (`clients`: their control APIs, or probes in
    their namespaces: orchestrator/run/netprobe.py)."""
    results = await asyncio.gather(*(node_offset(c, rounds, now_ns) for c in clients.values()))
    by_node = dict(zip(clients, results))
    return {"method": METHOD.format(how=how, n=rounds),
            "offsets_ns": {n: off for n, (off, _) in by_node.items()},
            "rtt_ns": {n: rtt for n, (_, rtt) in by_node.items()},
            "max_error_ns": max((rtt // 2 for _, rtt in results), default=0)}
