"""Network faults and joins in virtual time (the sim backend's executor of the fault timeline):
partitions hold frames until the heal, degraded links are slower, joined nodes take part."""
from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.model.link_shape import link_shapes
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.sim.engine import Simulation
from tests.support.scenarios import GOSSIPSUB_SIXTEEN, scenario_text

BASE = scenario_text("f", 4, GOSSIPSUB_SIXTEEN,
                     "workload: {publishers: 4, rate: 5/s, warmup: 3s, duration: 24s, drain: 4s, message_size: 1KB}")


def simulate(extra: str) -> tuple[Simulation, dict[str, dict[str, float]]]:
    sim = Simulation(make_plan(parse_scenario(BASE + extra)))
    sim.run()
    got: dict[str, dict[str, float]] = {}  # msg_id -> receiver -> seconds after T0
    for node_id, node in sim.net.nodes.items():
        for e in node.events:
            if e["type"] == "deliver_message":
                got.setdefault(e["msg_id"], {})[node_id] = e["ts"] / 1e9 - sim.t0
    return sim, got


def test_partition_keeps_messages_on_the_publishers_side_until_the_heal():
    sim, got = simulate("faults: [{at: 8s, action: partition, groups: [[n0, n1, n2, n3, n4, n5, n6, n7]], "
                        "duration: 8s}]\n")
    side = {f"n{i}": i < 8 for i in range(16)}
    during = [(t, origin, m) for t, _, origin, m in sim.sent if 8.0 < t < 16.0]
    assert len(during) > 20
    for t, origin, msg_id in during:
        receivers = got.get(msg_id, {})
        own = [n for n in side if side[n] == side[origin] and n != origin]
        assert all(receivers.get(n, 99) < 16.0 for n in own), msg_id  # its side had it before the heal
        across = [receivers[n] for n in receivers if side[n] != side[origin]]
        assert all(x >= 16.0 for x in across)  # nothing crossed while the cut held
    late = [m for t, _, o, m in sim.sent if 8.0 < t < 16.0 and len(got.get(m, {})) == 15]
    assert late  # TCP kept them: after the heal they reached the other side too
    after = [m for t, _, _, m in sim.sent if t > 18.0]
    assert after and all(len(got.get(m, {})) == 15 for m in after)  # healed: everyone again
    assert [f["action"] for f in sim.stats.faults_executed] == ["partition", "heal"]


def test_degraded_node_receives_later_and_recovers_after_restore():
    sim, got = simulate("faults: [{at: 8s, action: degrade, nodes: [n9], delay: 300ms, duration: 8s}]\n")
    pub = {m: t for t, _, _, m in sim.sent}
    slow = [got[m]["n9"] - pub[m] for m in pub if 9.0 < pub[m] < 15.0 and "n9" in got.get(m, {})]
    fast = [got[m]["n9"] - pub[m] for m in pub if pub[m] > 17.0 and "n9" in got.get(m, {})]
    assert slow and fast
    assert min(slow) >= 0.300 + 0.020  # the added latency, on top of the planned link
    assert max(fast) < 0.2  # restored


def test_a_jittered_node_receives_sooner_than_its_links_allow_until_the_restore():
    """Jitter of +-15 ms on n9's links, whose latency is 20 ms or more: a message reaches n9 first by
    whichever of its peers' copies came quickest, so some arrive sooner than any link of the plan
    allows, and none does after the restore."""
    sim, got = simulate("faults: [{at: 8s, action: jitter, nodes: [n9], jitter: 15ms, duration: 8s}]\n")
    quickest = link_shapes(sim.plan, 1.0)["n9"].delays[0][0] / 1000  # its nearest peer's latency
    pub = {m: t for t, _, _, m in sim.sent}
    during = [got[m]["n9"] - pub[m] for m in pub if 9.0 < pub[m] < 15.0 and "n9" in got.get(m, {})]
    after = [got[m]["n9"] - pub[m] for m in pub if pub[m] > 17.0 and "n9" in got.get(m, {})]
    assert len(during) > 20 and after
    print(f"n9's deliveries (links {quickest * 1000:g} ms or more): jittered from {min(during) * 1000:.1f} ms, "
          f"after the restore from {min(after) * 1000:.1f} ms")
    assert min(during) < quickest - 0.005 and min(after) >= quickest
    assert [f["action"] for f in sim.stats.faults_executed] == ["jitter", "restore"]


def test_a_joining_node_is_absent_then_receives():
    sim, got = simulate("faults: [{at: 10s, action: join, nodes: [n15]}]\n")
    starts = [e for e in sim.net.nodes["n15"].events if e["type"] == "start"]
    assert len(starts) == 1 and starts[0]["ts"] / 1e9 - sim.t0 >= 10.0
    pub = {m: t for t, _, _, m in sim.sent}
    # older than the gossip history (3 heartbeats) when it joined: never seen
    assert all("n15" not in got.get(m, {}) for m in pub if pub[m] < 6.0)
    later = [m for m in pub if pub[m] > 13.0]
    assert later and all("n15" in got.get(m, {}) for m in later)


def two_floodsub_nodes():
    """a and b, FloodSub on topic t, connected over a 50 ms link with no bandwidth modelled, at t = 1 s."""
    from node.protocols import FloodSub
    from node.simulated.virtual_network import MemNetwork

    net = MemNetwork(seed=1, latency=0.05)
    for n in ("a", "b"):
        net.add_node(n, FloodSub)
        net.nodes[n].core.subscribe("t")
    net.connect("a", "b")
    net.run(until=1.0)
    return net


def test_frames_across_a_partition_are_released_at_the_next_retransmission():
    net = two_floodsub_nodes()
    net.cut_off({"a": frozenset({"b"})})    # one side's cut holds both directions
    net.nodes["a"].core.publish("t", b"x")   # held at t=1.0
    net.run(until=3.0)
    assert not net.nodes["b"].delivered
    net.cut_off({"a": frozenset()})  # RTO 0.2 + 0.1 RTT = 0.3, doubling: retransmissions at 1.3, 1.9, 3.1 -> 3.1
    net.run(until=5.0)
    (d,) = net.nodes["b"].delivered
    assert abs(d.time - (3.1 + 0.05)) < 1e-6


def test_a_restored_link_does_not_let_a_frame_overtake_one_sent_while_it_was_degraded():
    """A direction of a connection keeps its order, as TCP's stream does, across a degradation's
    restore too: with no bandwidth modelled (frames not otherwise ordered), a frame sent just after the
    restore arrives after the one sent just before it, not 300 ms ahead of it."""
    net = two_floodsub_nodes()
    net.degrade("a", delay=0.3)
    net.nodes["a"].core.publish("t", b"first")    # due at 1.35
    net.degrade("a")                               # restored at once
    net.nodes["a"].core.publish("t", b"second")   # due at 1.05 on the planned link: held behind the first
    net.run(until=2.0)
    assert [d.data for d in net.nodes["b"].delivered] == [b"first", b"second"]
    assert net.nodes["b"].delivered[1].time >= net.nodes["b"].delivered[0].time


def test_a_partition_on_top_of_one_that_lasts_adds_its_cuts_as_on_a_live_run():
    """The simulator applies the live run's link shapes (orchestrator/faults/next_shapes.py): a node is
    cut off from its contacts across either partition until the heal (the second once replaced the first)."""
    sim = Simulation(make_plan(parse_scenario(BASE)))
    first = [[f"n{i}" for i in range(8)], [f"n{i}" for i in range(8, 16)]]
    second = [[f"n{i}" for i in range(0, 16, 2)], [f"n{i}" for i in range(1, 16, 2)]]
    sim.partition(first)
    sim.partition(second)

    def together(groups: list[list[str]], a: str, b: str) -> bool:
        return any(a in g and b in g for g in groups)
    pairs = [(n.id, p) for n in sim.plan.nodes for p in n.contacts]
    kept = [together(first, a, b) and together(second, a, b) for a, b in pairs]
    assert any(kept) and not all(kept)
    assert [sim.net._reachable(a, b) for a, b in pairs] == kept
    sim.heal()
    assert all(sim.net._reachable(a, b) for a, b in pairs) and not sim.net.cut


def test_a_node_dials_only_the_peers_it_has_an_address_of_as_a_node_process_does():
    """GossipSub's direct peers (and its peer exchange) can name a node the plan makes no contact: a
    node process has no address of it in its config and does not dial it; nor does the simulator (it
    once connected them at the plan's latency, which no shaping would have given)."""
    text = scenario_text("f", 4, GOSSIPSUB_SIXTEEN, "protocol: {name: gossipsub, params: {direct_peers: [n0]}}",
                         "topology: {algorithm: random, degree: 2}",
                         "workload: {publishers: 4, rate: 5/s, warmup: 3s, duration: 6s, drain: 2s, message_size: 1KB}")
    sim = Simulation(make_plan(parse_scenario(text)))
    strangers = [n.id for n in sim.plan.nodes if n.id != "n0" and "n0" not in n.contacts]
    assert strangers  # nodes n0 is no contact of: each one's core asks to dial it
    sim.run()
    connected = {(n, e["peer"]) for n, node in sim.net.nodes.items() for e in node.events if e["type"] == "connect"}
    assert connected and all(b in sim.plan.node(a).contacts for a, b in connected)
    assert not any(("n0", s) in connected for s in strangers)


def test_a_shape_change_the_simulated_network_cannot_apply_stops_the_run_naming_the_node():
    """The plan's own loss is no field a fault changes, and the network has no way to change it mid-run:
    a shape that does is refused by name, not applied in part."""
    sim = Simulation(make_plan(parse_scenario(BASE)))
    changed = replace(sim._applied["n3"], loss=0.5)
    with pytest.raises(NotImplementedError, match="sim: n3's link changes in a way the simulated network does not"):
        sim._apply([changed])
    assert sim._applied["n3"] != changed  # nothing of it applied
