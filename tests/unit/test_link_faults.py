"""Live link faults as shapes (orchestrator/faults/next_shapes.py) and the one call that applies them
(`LinkShaper.apply_all`): only what changed is done. A bandwidth-only degrade changes the rates and
touches no latency bucket; a degrade, restore, partition and heal each do what they did when they were
calls of their own (Rate on both ends, netem's DegradeEgress and DegradeIngress, the delay line's
`degrade`, the transport's POST /links, a Cut through the filters prepared at deploy, the Heal), on a
run dilated by 2 (latencies times 2, rates divided by 2)."""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from orchestrator.faults.next_shapes import LinkFaults
from orchestrator.model.link_shape import link_shapes
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.shaping import ops
from orchestrator.shaping.mechanisms import DelayLineShaper, NetemShaper, TransportShaper
from tests.support.loopback_backend import ShapingRecorder
from tests.support.loopback_backend import own_address as address
from tests.support.scenarios import scenario_text

K = 2
SCENARIO = scenario_text("link-faults", 4, """\
nodes: {count: 8}
protocol: floodsub
topology: {algorithm: complete}
network: {latency: {model: unit-square, scale: 60ms, base: 5ms}, latency_bucket: 5ms, jitter: 1ms, loss: 0.01,
          bandwidth_up: 40mbit, bandwidth_down: 30mbit}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 2, rate: 2/s, duration: 6s}
faults:
  - {at: 1s, action: partition, groups: [[n0, n1, n2]], duration: 1s}
""")
SIDES = [["n0", "n1", "n2"], ["n3", "n4", "n5", "n6", "n7"]]


class Run:
    """A shaper deployed on the recording backend, and the run's link faults."""

    def __init__(self, scratch, cls=NetemShaper, **kw):
        self.plan = make_plan(parse_scenario(SCENARIO, overrides=[f"dilation={K}"]))
        self.backend = ShapingRecorder(self.plan, scratch)
        self.shaper = cls(self.plan, self.backend, asyncio.to_thread, **kw)
        self.links = LinkFaults(link_shapes(self.plan, K), K)
        self.apply(self.links.planned.values())

    def apply(self, shapes) -> list[tuple[str, ops.Op]]:
        """What `apply_all(shapes)` asked of the backend."""
        self.backend.ops.clear()
        self.changed = asyncio.run(self.shaper.apply_all(shapes))
        return list(self.backend.ops)


@pytest.fixture
def run(tmp_path):
    return Run(tmp_path)


def test_deploy_is_each_nodes_trees_and_the_planned_partitions_filters(tmp_path):
    r = Run(tmp_path)
    shapes = r.links.planned
    deployed = list(r.backend.ops)
    assert [op.op for _, op in deployed] == ["egress", "download", "prepare_cut"] * 8  # by namespace
    assert r.changed == [f"n{i}: shaped" for i in range(8)]
    for where, op in deployed:
        node = where.split("-")[1]
        if op.op == "egress":  # netem: a bucket per latency, dilated
            assert op.up_bps == 20_000_000 and op.jitter_ms == 2 and op.loss == 0.01
            assert op.buckets == tuple((d, tuple(sorted(map(address, peers)))) for d, peers in shapes[node].delays)
        elif op.op == "download":
            assert (where, op.bps) == (f"switch-{node}", 15_000_000)
        else:  # every node has peers across: what comes from them, in its contacts' order
            side = 0 if node in SIDES[0] else 1
            across = [p for p in r.plan.node(node).contacts if p in SIDES[1 - side]]
            assert (where, op.sources, op.partition) == (f"switch-{node}", tuple(map(address, across)), 0)
    assert r.apply(r.links.current.values()) == [] and r.changed == []  # nothing changed: nothing done


def test_a_bandwidth_only_degrade_changes_the_rates_alone(run):
    done = run.apply(run.links.degrade("n4", 0.0, 0.0, 6_000_000))
    assert done == [("host-n4", ops.Rate("lo", 3_000_000)), ("switch-n4", ops.Rate("lo", 3_000_000))]
    assert run.changed == ["n4: rate 3000000/3000000 bit/s"] and "n4" in run.links.degraded
    done = run.apply(run.links.restore("n4"))
    assert done == [("host-n4", ops.Rate("lo", 20_000_000)), ("switch-n4", ops.Rate("lo", 15_000_000))]
    assert "n4" not in run.links.degraded


def test_a_degrade_and_its_restore_do_what_they_did(run):
    planned = run.links.planned["n4"]
    delays = tuple(d for d, _ in planned.delays)
    done = run.apply(run.links.degrade("n4", 40.0, 0.1, 6_000_000))
    assert done == [("host-n4", ops.Rate("lo", 3_000_000)),
                    ("host-n4", ops.DegradeEgress("lo", 20_000_000, delays, 2.0, 0.01, 80.0, 0.1)),
                    ("switch-n4", ops.Rate("lo", 3_000_000)),
                    ("switch-n4", ops.DegradeIngress("lo", 15_000_000, 80.0, 0.1))]
    done = run.apply(run.links.restore("n4"))
    assert done == [("host-n4", ops.Rate("lo", 20_000_000)),
                    ("host-n4", ops.DegradeEgress("lo", 20_000_000, delays, 2.0, 0.01, 0.0, 0.0)),
                    ("switch-n4", ops.Rate("lo", 15_000_000)),
                    ("switch-n4", ops.DegradeIngress("lo", 15_000_000, 0.0, 0.0))]
    # latency alone: the rates are left as they are, at the degrade and at its restore
    latency_only = ["degrade_egress", "degrade_ingress"]
    assert [op.op for _, op in run.apply(run.links.degrade("n4", 40.0, 0.0, 0))] == latency_only
    assert [op.op for _, op in run.apply(run.links.restore("n4"))] == latency_only
    assert run.links.current == run.links.planned


def test_a_partition_cuts_through_the_filters_of_deploy_and_the_heal_undoes_it(run):
    done = run.apply(run.links.partition(SIDES))
    assert done == [(f"switch-n{i}", ops.Cut("lo", 0)) for i in range(8)]
    assert run.links.current["n0"].cut_from == frozenset(SIDES[1])
    # a restore while the partition lasts keeps it
    run.apply(run.links.degrade("n0", 10.0, 0.0, 0))
    assert "heal" not in [op.op for _, op in run.apply(run.links.restore("n0"))]
    assert run.links.current["n0"].cut_from == frozenset(SIDES[1])
    assert run.apply(run.links.heal()) == [(f"switch-n{i}", ops.Heal("lo")) for i in range(8)]
    assert run.links.current == run.links.planned


def test_a_partition_the_plan_did_not_hold_gets_its_filters_when_it_comes(run):
    done = run.apply(run.links.partition([["n0"], [f"n{i}" for i in range(1, 8)]]))
    prepared = [(where, op) for where, op in done if op.op == "prepare_cut"]
    assert prepared[0] == ("switch-n0", ops.PrepareCut("lo", tuple(address(f"n{i}") for i in range(1, 8)), 1))
    assert [where for where, _ in prepared[1:]] == [f"switch-n{i}" for i in range(1, 8)]
    assert all(op.sources == (address("n0"),) and op.partition == 1 for _, op in prepared[1:])
    cuts = [(where, op) for where, op in done if op.op == "cut"]
    assert cuts == [(f"switch-n{i}", ops.Cut("lo", 1)) for i in range(8)]
    # the planned one on top: only the links it cuts further, through the filters of deploy
    done = run.apply(run.links.partition(SIDES))
    assert done == [(f"switch-n{i}", ops.Cut("lo", 0)) for i in range(1, 8)]


class Lines:
    """The delay line's requests, recorded."""

    def __init__(self):
        self.requests: list[dict] = []
        self.attached: dict[str, dict[str, float]] = {}

    def request(self, op):
        assert isinstance(op, ops.LineOp), op  # typed, as the real line takes them
        self.requests.append(ops.wire(op))
        return {}

    def attach(self, node, ifname, delays_ms):
        self.attached[node] = delays_ms


def test_the_delay_line_is_attached_with_the_shapes_and_told_degradations_only(tmp_path, monkeypatch):
    lines = Lines()
    monkeypatch.setattr("orchestrator.shaping.delayline.DelayLines", lambda *a, **kw: lines)
    run = Run(tmp_path, DelayLineShaper)
    shapes = run.links.planned
    assert lines.requests == [{"op": "links", "ips": run.shaper.address_of, "jitter_ms": 2.0, "loss": 0.01}]
    assert lines.attached["n3"] == {address(p): shapes[p].delay_to("n3") for p in run.plan.node("n3").contacts}
    assert [op.op for _, op in run.backend.ops].count("egress") == 8
    assert all(op.buckets == () for _, op in run.backend.ops if op.op == "egress")  # latency is the line's
    lines.requests.clear()
    run.apply(run.links.degrade("n3", 0.0, 0.0, 6_000_000))
    assert lines.requests == []
    run.apply(run.links.degrade("n3", 25.0, 0.2, 0))
    run.apply(run.links.restore("n3"))
    assert lines.requests == [{"op": "degrade", "node": "n3", "delay_ms": 50.0, "loss": 0.2, "jitter_ms": 0.0},
                              {"op": "degrade", "node": "n3", "delay_ms": 0.0, "loss": 0.0, "jitter_ms": 0.0}]


def test_the_transport_is_told_degradations_by_the_node_and_its_peers(tmp_path):
    told: list[tuple[str, dict]] = []

    async def tell(node, body):
        told.append((node, body))

    run = Run(tmp_path, TransportShaper, tell=tell, warn=print)
    assert run.shaper.node_delays("n2")["delays_ms"] == {p: run.links.planned["n2"].delay_to(p)
                                                         for p in run.plan.node("n2").contacts}
    run.apply(run.links.degrade("n2", 0.0, 0.0, 6_000_000))
    assert told == []
    run.apply(run.links.degrade("n2", 30.0, 0.0, 6_000_000))
    assert sorted(n for n, _ in told) == [f"n{i}" for i in range(8)]
    assert {tuple(body.items()) for _, body in told} == {(("node", "n2"), ("delay_ms", 60.0), ("jitter_ms", 0.0),
                                                          ("loss", 0.0))}


def test_a_shape_applied_twice_is_done_once(run):
    degraded = run.links.degrade("n1", 5.0, 0.0, 0)
    assert len(run.apply(degraded)) == 2
    assert run.apply(degraded) == [] and run.apply([replace(degraded[0])]) == []


def test_the_operations_cross_into_a_container_as_they_are(run):
    todo = [op for _, op in run.backend.ops]  # the deploy's
    todo += [op for _, op in run.apply(run.links.degrade("n4", 40.0, 0.1, 6_000_000))]
    assert {op.op for op in todo} >= {"egress", "download", "prepare_cut", "rate", "degrade_egress", "degrade_ingress"}
    assert ops.from_wire(json.loads(json.dumps(ops.to_wire(todo)))) == todo


def test_the_delay_lines_operations_cross_to_a_cluster_nodes_daemon_as_they_are(tmp_path, monkeypatch):
    """What the delay line is told (typed) reaches a cluster node's daemon as JSON and comes out the same
    operations there (ops.line_op); one the daemon does not know is refused, not passed on."""
    lines = Lines()
    monkeypatch.setattr("orchestrator.shaping.delayline.DelayLines", lambda *a, **kw: lines)
    run = Run(tmp_path, DelayLineShaper)
    run.apply(run.links.degrade("n3", 25.0, 0.2, 0))
    told = [*lines.requests, ops.wire(ops.LineStats()),
            ops.wire(ops.LineAttach("/proc/1/ns/net", "eth0", "n3", {"10.0.0.2": 20.0}))]
    assert [ops.wire(ops.line_op(json.loads(json.dumps(item)))) for item in told] == told
    with pytest.raises(ValueError, match="unknown delay line operation 'teleport'"):
        ops.line_op({"op": "teleport"})
