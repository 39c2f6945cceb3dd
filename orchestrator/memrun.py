"""A run plan executed on the in-memory network (node/memnet.py) in virtual time: the same plan a
backend would deploy (latency matrix, subscriptions, dial lists, attackers, publish schedule), the
same unchanged protocol cores, no processes, no kernel. Bandwidth and processing time are not
modelled (memnet has latency only), so it answers "how does the algorithm behave", in seconds, for
parameter sweeps (`peerlab bench topiary-sweep`); emulation answers "how does it run".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from node.memnet import MemNetwork
from node.protocols import get_protocol
from orchestrator.plan import RunPlan


@dataclass
class MessageOutcome:
    t_pub: float
    topic: str
    expected: int
    latencies: list[float]   # seconds, one per honest subscriber reached


def run_in_memory(plan: RunPlan) -> list[MessageOutcome]:
    lat = plan.latency_ms
    net = MemNetwork(plan.seed, lambda a, b: lat[int(a[1:])][int(b[1:])] / 1000)
    for node in plan.nodes:
        cls = get_protocol(node.protocol)
        net.add_node(node.id, cls, cls.Params(**node.params), behaviour=node.behaviour or None)
    for node in plan.nodes:
        for topic in node.subscriptions:
            net.nodes[node.id].core.subscribe(topic)
    for node in plan.nodes:
        for peer in node.dial:
            net.connect(node.id, peer)
    publishes = sorted((t, n.id, topic, size) for n in plan.nodes for t, topic, size in n.schedule)
    sent = []
    for t, node_id, topic, size in publishes:
        net.run(until=t)
        sent.append((t, topic, node_id, net.nodes[node_id].core.publish(topic, bytes(size))))
    net.run(until=plan.end)
    got: dict[str, dict[str, float]] = {}
    for node_id, node in net.nodes.items():
        for d in node.delivered:
            got.setdefault(d.msg_id, {})[node_id] = d.time
    honest = {n.id for n in plan.nodes if n.role == "honest"}
    subscribers = {t: {n.id for n in plan.nodes if t in n.subscriptions} & honest for t in plan.topics}
    out = []
    for t, topic, origin, msg_id in sent:
        want = subscribers[topic] - {origin}
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
