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

from orchestrator.control.node_client import ControlClient

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
    their namespaces: orchestrator/fidelity/netprobe.py)."""
    results = await asyncio.gather(*(node_offset(c, rounds, now_ns) for c in clients.values()))
    by_node = dict(zip(clients, results))
    return {"method": METHOD.format(how=how, n=rounds),
            "offsets_ns": {n: off for n, (off, _) in by_node.items()},
            "rtt_ns": {n: rtt for n, (_, rtt) in by_node.items()},
            "max_error_ns": max((rtt // 2 for _, rtt in results), default=0)}


def merge(section: dict[str, Any], measured: dict[str, Any], domains: dict[str, str]) -> None:
    """An estimate's offsets into the manifest's clock section (changed in place), one per machine."""
    if "rtt_ns" not in section:
        section.update(method=measured["method"], offsets_ns={}, rtt_ns={}, max_error_ns=0)
    section["offsets_ns"].update(measured["offsets_ns"])
    section["rtt_ns"].update(measured["rtt_ns"])
    section["max_error_ns"] = max(section["max_error_ns"], measured["max_error_ns"])
    one_offset_per_machine(section, domains)


def one_offset_per_machine(section: dict[str, Any], domains: dict[str, str]) -> None:
    """Nodes on one machine (`domains`: node -> machine) read one clock: each takes the offset measured
    with the shortest round trip among them (an estimate's error is up to half its round trip, which
    through an API server's proxy is tens of ms: on a one-node cluster, per-pod estimates spread over
    17 ms). `section` is the manifest's clock section, changed in place."""
    if not domains:
        return
    machines: dict[str, list[str]] = {}
    for node_id in section["rtt_ns"]:
        machines.setdefault(domains.get(node_id, node_id), []).append(node_id)
    best = {m: min(members, key=lambda n: section["rtt_ns"][n]) for m, members in machines.items()}
    for machine, members in machines.items():
        for node_id in members:
            section["offsets_ns"][node_id] = section["offsets_ns"][best[machine]]
    section["max_error_ns"] = max(section["rtt_ns"][b] // 2 for b in best.values())
    section["machines"] = {m: sorted(members) for m, members in machines.items()}
    rule = "; nodes on one machine share its clock: each takes the offset of the shortest round trip among them"
    if rule not in section["method"]:
        section["method"] += rule
