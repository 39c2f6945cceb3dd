"""Message outcomes of a run plan simulated in memory, for parameter sweeps (`peerlab bench
topiary-sweep`): the sim backend's engine (orchestrator/sim/engine.py) without event files, and by default
without the bandwidth model (latency only), which is what the algorithm's quality depends on for
small messages. It answers "how does the algorithm behave" in seconds; `--backend sim` and
emulation write full runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from node.protocols.content.predicates import subscription_times
from orchestrator.model.plan import RunPlan
from orchestrator.sim.engine import Simulation


@dataclass
class MessageOutcome:
    t_pub: float
    topic: str
    expected: int
    latencies: list[float]   # seconds, one per honest subscriber reached


def run_in_memory(plan: RunPlan, bandwidth: bool = False) -> list[MessageOutcome]:
    sim = Simulation(plan, sink=lambda node, event: None, bandwidth=bandwidth, keep_deliveries=True)
    sim.run()
    got: dict[str, dict[str, float]] = {}
    for node_id, node in sim.net.nodes.items():
        for d in node.delivered:
            got.setdefault(d.msg_id, {})[node_id] = d.time - sim.t0
    since: dict[str, dict[str, float]] = {}  # topic -> honest subscriber -> from when it expects messages
    for n in plan.nodes:
        if n.role == "honest":
            times = subscription_times(plan.matching, plan.topics, n.subscriptions, n.late_subscriptions)
            for topic, at in times.items():
                since.setdefault(topic, {})[n.id] = at
    out = []
    for t, topic, origin, msg_id in sim.sent:
        want = {n for n, at in since.get(topic, {}).items() if at <= t} - {origin}
        reached = got.get(msg_id, {})
        out.append(MessageOutcome(t, topic, len(want), [reached[n] - t for n in want if n in reached]))
    return out


def per_window(outcomes: list[MessageOutcome], start: float, width: float, windows: int
               ) -> tuple[list[float | None], list[float | None]]:
    """The seed's measures per window of publish time: mean receive rate, mean delay (ms)."""
    rate: list[float | None] = []
    delay: list[float | None] = []
    for k in range(windows):
        msgs = [m for m in outcomes if m.expected and start + k * width <= m.t_pub < start + (k + 1) * width]
        lats = [x for m in msgs for x in m.latencies]
        rate.append(sum(len(m.latencies) / m.expected for m in msgs) / len(msgs) if msgs else None)
        delay.append(1000 * sum(lats) / len(lats) if lats else None)
    return rate, delay


def converged(series: list[float | None], last: int = 5) -> float:
    values = [v for v in series[-last:] if v is not None]
    return sum(values) / len(values) if values else math.nan
