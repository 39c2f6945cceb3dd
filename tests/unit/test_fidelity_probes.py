"""The RTT probes of the fidelity watch: planned pairs pinged through the nodes' calibration
endpoint, held against the plan's RTT; failures not counted, degraded links not probed."""
import asyncio

from orchestrator.fidelity import probes
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from tests.support.scenarios import FLOODSUB_SIX, scenario_text

PLAN = make_plan(parse_scenario(scenario_text("probes", 3, FLOODSUB_SIX)))


class FakeNode:
    def __init__(self, node_id, rtt_ms, down=()):
        self.node_id, self.rtt_ms, self.down = node_id, rtt_ms, down
        self.asked = []

    async def post(self, path, body, timeout=30.0):
        assert path == "/calibrate/ping" and body["count"] == probes.PINGS and timeout == probes.TIMEOUT_S
        self.asked.append(body["peer"])
        if self.node_id in self.down or body["peer"] in self.down:
            raise RuntimeError("not connected")
        return {"rtt_ms": [self.rtt_ms, self.rtt_ms + 1, 500.0]}  # the median is kept


def test_a_round_probes_planned_pairs_against_the_plan():
    nodes = {n.id: FakeNode(n.id, 21.0) for n in PLAN.nodes}
    rtt = probes.RttProbes(PLAN, nodes.__getitem__)
    done = asyncio.run(rtt.round())
    assert len(done) == probes.PAIRS and rtt.pings == probes.PAIRS * probes.PINGS
    planned = {(n.id, p) for n in PLAN.nodes for p in n.dial}
    for p in done:
        assert (p["a"], p["b"]) in planned
        assert p["configured_ms"] == 20.0 and p["measured_ms"] == 22.0


def test_failures_are_not_counted_and_degraded_links_not_probed():
    nodes = {n.id: FakeNode(n.id, 21.0, down={"n1"}) for n in PLAN.nodes}
    rtt = probes.RttProbes(PLAN, nodes.__getitem__, degraded=lambda: {"n2"})
    for _ in range(5):
        for p in asyncio.run(rtt.round()):
            assert "n1" not in (p["a"], p["b"])
    assert not any(node.asked for node_id, node in nodes.items() if node_id == "n2")
    assert not any("n2" in node.asked for node in nodes.values())
    assert rtt.traffic_bytes() == rtt.pings * 2 * probes.PING_FRAME_BYTES
