"""Calibration: before T0, measure what the shaped network really does and compare with the plan.

RTT on sampled neighbour pairs and upload throughput on sampled nodes, through peerlab's nodes' own
data connections (so transport-mode delays are measured too), or, for an adapter's nodes, which have
no probes, through probes in their namespaces before they start (orchestrator/fidelity/netprobe.py). Throughput is the fastest of
`throughput_rounds` probes: a loaded host can only slow a probe down, never speed it past the shaper.
The sender measures payload (goodput) from TCP's acknowledgements; the configured rate counts what
HTB counts, Ethernet frames with their headers, so each probe also reads the sender's link class before and after (`link_sent`)
and the rate compared with the plan is the goodput times the frames' bytes per payload byte.
Results, configured vs measured, go into the manifest; errors above the tolerance become warnings.
"""
from __future__ import annotations

import asyncio
import random
import statistics
from typing import Any, Awaitable, Callable

from orchestrator.control.node_client import ControlClient
from orchestrator.fidelity.netprobe import ProbeClient
from orchestrator.model.plan import RunPlan
from orchestrator.model.sections import Calibration

PINGS = 5
RTT_SLACK_MS = 1.0  # scheduler and kernel time on a loaded 2-core machine


def _edges(plan: RunPlan) -> list[tuple[str, str]]:
    """Planned links between nodes present at T0 (nodes that join later are not up yet)."""
    return [(n.id, peer) for n in plan.nodes if not n.absent for peer in n.dial if not plan.node(peer).absent]


def _error_pct(measured: float, configured: float) -> float:
    return abs(measured - configured) / configured * 100 if configured else 0.0


async def calibrate(plan: RunPlan, clients: dict[str, ControlClient | ProbeClient], cal: Calibration,
                    link_sent: Callable[[str], Awaitable[int | None]] | None = None) -> dict[str, Any]:
    """`link_sent(node)`: bytes its link class has sent so far (the shaper's count), or None where the
    backend cannot read it; without it the throughput compared with the plan is the goodput."""
    rng = random.Random(f"peerlab:{plan.seed}:calibration")
    edges = _edges(plan)
    pairs = rng.sample(edges, min(cal.pairs, len(edges)))

    async def rtt(a: str, b: str) -> dict[str, Any]:
        reply = await clients[a].post("/calibrate/ping", {"peer": b, "count": PINGS}, timeout=30 * plan.dilation)
        measured = statistics.median(reply["rtt_ms"])
        configured = plan.one_way_ms(a, b) + plan.one_way_ms(b, a)
        ok = abs(measured - configured) <= cal.tolerance * configured + RTT_SLACK_MS
        # measured: the median, what frames took; min_ms: the quickest ping, the shaper's own delay
        # plus the least host time (a loaded host only adds to a round trip)
        return {"a": a, "b": b, "configured_ms": configured, "measured_ms": round(measured, 3),
                "min_ms": round(min(reply["rtt_ms"]), 3),
                "error_pct": round(_error_pct(measured, configured), 2), "ok": ok}

    rtts = await asyncio.gather(*(rtt(a, b) for a, b in pairs))

    # throughput: disjoint sender/receiver pairs, measured at the same time
    senders, used = [], set()
    for a, b in rng.sample(edges, len(edges)):
        if len(senders) >= cal.throughput_nodes:
            break
        if a not in used and b not in used:
            senders.append((a, b))
            used |= {a, b}

    async def throughput(a: str, b: str) -> dict[str, Any]:
        rounds, goodput, per_payload = [], [], []
        for _ in range(cal.throughput_rounds):
            before = await link_sent(a) if link_sent else None
            reply = await clients[a].post("/calibrate/throughput", {"peer": b, "bytes": cal.probe_bytes},
                                          timeout=120 * plan.dilation)  # the probe runs at the real rate, / k
            after = await link_sent(a) if before is not None else None
            # frames per payload byte, over all the probe sent (the reply says how much: a probe
            # beside an adapter's node sends twice the bytes, its first half for TCP's slow start)
            ratio = None if after is None else (after - before) / reply.get("sent_bytes", cal.probe_bytes)
            goodput.append(round(reply["mbit"], 3))
            per_payload.append(None if ratio is None else round(ratio, 4))
            rounds.append(round(reply["mbit"] * (ratio or 1.0), 3))
        configured = min(plan.node(a).bandwidth_up, plan.node(b).bandwidth_down) / 1e6
        best = rounds.index(max(rounds))
        error = _error_pct(rounds[best], configured)
        return {"from": a, "to": b, "configured_mbit": configured, "measured_mbit": rounds[best],
                "goodput_mbit": goodput[best], "wire_per_payload": per_payload[best],
                "rounds_mbit": rounds, "error_pct": round(error, 2), "ok": error <= cal.tolerance * 100}

    rates = await asyncio.gather(*(throughput(a, b) for a, b in senders))
    warnings = [f"RTT {r['a']}->{r['b']}: measured {r['measured_ms']} ms, configured {r['configured_ms']} ms"
                for r in rtts if not r["ok"]]
    warnings += [f"throughput {r['from']}->{r['to']}: measured {r['measured_mbit']} Mbit/s, configured "
                 f"{r['configured_mbit']} Mbit/s" for r in rates if not r["ok"]]
    return {
        "rtt": list(rtts), "throughput": list(rates), "tolerance": cal.tolerance,
        "latency_error_pct": round(statistics.mean(r["error_pct"] for r in rtts), 2) if rtts else None,
        "bandwidth_error_pct": round(statistics.mean(r["error_pct"] for r in rates), 2) if rates else None,
        "warnings": warnings,
    }
