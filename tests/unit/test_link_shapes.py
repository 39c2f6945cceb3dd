"""A link's condition as one value (orchestrator/model/link_shape.py): the planned shapes give every
mechanism exactly the latencies and rates the plan gave shaping before they existed (the dilated
plan's, bucket by bucket): netem's buckets, the delay line's per-source delays and the transport's
per-destination delays, for several latency models, dilated and not. The expectations are computed
here from the plan as that code did (a contact's latency times k, rounded to the bucket width times k)."""
from __future__ import annotations

import asyncio

import pytest

from node import ids
from orchestrator.model.link_shape import dilated_rate, link_shapes
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import load_scenario, parse_scenario
from orchestrator.shaping.mechanisms import NetemShaper, TransportShaper, egress_buckets, ingress_delays
from tests.support.loopback_backend import ShapingRecorder
from tests.support.loopback_backend import own_address as address
from tests.support.scenarios import GOSSIPSUB_TEN_SQUARE, scenario_text

UNIT_SQUARE = scenario_text("shapes", 4, GOSSIPSUB_TEN_SQUARE)
# every node a contact of every other (a directory protocol), 1 ms buckets: many buckets per node
MANY_BUCKETS = scenario_text("buckets", 9, """\
nodes: {count: 30}
protocol: topiary
topology: {degree: 4}
network: {latency: {model: unit-square, scale: 130ms, base: 3ms}, latency_bucket: 1ms, loss: 0.01, jitter: 1ms}
topics: {count: 3, subscriptions: {model: interest, rate: 0.5}}
workload: {publishers: 2, rate: 2/s, duration: 3s}
""")
REGIONS = scenario_text("regions", 2, """\
nodes: {count: 24}
protocol: floodsub
topology: {algorithm: complete}
network: {latency: {model: weighted-regions}, latency_bucket: 3ms}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 2, rate: 2/s, duration: 3s}
""")
CASES = [(UNIT_SQUARE, k) for k in (1, 2, 2.5, 3.7)] + [(MANY_BUCKETS, k) for k in (1, 1.3, 7)] + \
        [(REGIONS, k) for k in (1, 4.2)] + [("scenarios/overlay-cdmax-vs-random.yaml", k) for k in (1, 12.5)]


def _plan(text: str, k: float):
    if text.endswith(".yaml"):
        return make_plan(load_scenario(text, [f"dilation={k}"]))
    return make_plan(parse_scenario(text, overrides=[f"dilation={k}"]))


def as_before(plan) -> dict[str, dict]:
    """Per node what shaping was given before shapes: the plan with every latency (and the bucket width)
    times k, jitter times k and rates divided by k (k = 1: the plan itself), read as netem's buckets
    (one-way ms, jitter, loss, the sorted addresses at it), the transport's delays by destination and the
    delay line's by source address."""
    k = plan.dilation
    lat, width, jitter = plan.latency_ms, plan.latency_bucket_ms, plan.jitter_ms
    rate = lambda bps: bps  # noqa: E731
    if k != 1:
        lat = [[x * k for x in row] for row in lat]
        width, jitter = width * k, jitter * k
        rate = lambda bps: max(1, round(bps / k)) if bps else 0  # noqa: E731

    def one_way(a: str, b: str) -> float:
        raw = lat[ids.node_index(a)][ids.node_index(b)]
        return round(round(raw / width) * width, 6)

    out = {}
    for node in plan.nodes:
        peers = node.contacts or node.neighbours
        by_delay: dict[float, list[str]] = {}
        for p in peers:
            by_delay.setdefault(one_way(node.id, p), []).append(address(p))
        out[node.id] = {
            "rates": (rate(node.bandwidth_up), rate(node.bandwidth_down)),
            "buckets": [(d, jitter, plan.loss, tuple(sorted(a))) for d, a in sorted(by_delay.items())],
            "transport": ([(p, one_way(node.id, p)) for p in peers], jitter, plan.loss),
            "ingress": [(address(p), one_way(p, node.id)) for p in peers]}
    return out


def shaped(plan, scratch, cls=NetemShaper, **kw):
    backend = ShapingRecorder(plan, scratch)
    shaper = cls(plan, backend, asyncio.to_thread, **kw)
    asyncio.run(shaper.apply_all(link_shapes(plan, plan.dilation).values()))
    return shaper, backend


@pytest.mark.parametrize("text,k", CASES)
def test_the_planned_shapes_are_what_the_dilated_plan_gave(text, k, tmp_path):
    plan = _plan(text, k)
    before = as_before(plan)
    shapes = link_shapes(plan, plan.dilation)
    assert list(shapes) == [n.id for n in plan.nodes]
    addresses = {n.id: address(n.id) for n in plan.nodes}
    for node in plan.nodes:
        shape, was = shapes[node.id], before[node.id]
        peers = node.contacts or node.neighbours
        assert (shape.up_bps, shape.down_bps) == was["rates"]
        assert [(d, shape.jitter_ms, shape.loss, a) for d, a in egress_buckets(shape, addresses)] == was["buckets"]
        assert list(ingress_delays(shapes, node.id, peers, addresses).items()) == was["ingress"]
        assert sorted(shape.peers, key=ids.node_index) == list(peers) and not shape.cut_from
    # what the mechanisms do with them: netem's trees, the transport's node configs
    netem, backend = shaped(plan, tmp_path / "netem")
    egress = {where[5:]: op for where, op in backend.ops if op.op == "egress"}
    for node in plan.nodes:
        op, was = egress[node.id], before[node.id]
        assert (op.up_bps, [(d, op.jitter_ms, op.loss, a) for d, a in op.buckets]) == (was["rates"][0], was["buckets"])
    assert {where[7:]: op.bps for where, op in backend.ops if op.op == "download"} == \
        {n: was["rates"][1] for n, was in before.items()}
    transport, _ = shaped(plan, tmp_path / "transport", TransportShaper, tell=None, warn=print)
    for node in plan.nodes:
        links = transport.node_delays(node.id)
        assert (list(links["delays_ms"].items()), links["jitter_ms"], links["loss"]) == before[node.id]["transport"]


def test_many_buckets_and_dilated_latencies_are_rounded_as_before():
    plan = _plan(MANY_BUCKETS, 7)
    shapes = link_shapes(plan, 7)
    assert max(len(s.delays) for s in shapes.values()) > 20  # 1 ms buckets x 7
    assert all(d == round(round(d / 7) * 7, 6) for s in shapes.values() for d, _ in s.delays)
    undilated = link_shapes(_plan(MANY_BUCKETS, 1), 1)
    assert shapes["n3"].jitter_ms == 7 * undilated["n3"].jitter_ms == 7


def test_a_rate_is_divided_by_k_and_never_to_nothing():
    assert dilated_rate(40_000_000, 2.5) == 16_000_000
    assert dilated_rate(3, 7) == 1 and dilated_rate(0, 7) == 0 and dilated_rate(5, 1) == 5
