"""GossipSub router core on the deterministic in-memory network."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.protocols.gossipsub.core import GossipSub, GossipSubParams
from node.protocols.pubsub.pubsub_pb2 import RPC, ControlGraft, ControlIDontWant, ControlMessage
from node.simulated.virtual_network import MemNetwork
from tests.support.pubsub import authored, wire_ids


def network(n=30, degree=10, seed=1, latency=0.02, **params):
    net = MemNetwork(seed=seed, latency=latency)
    p = GossipSubParams(**params)
    for i in range(n):
        net.add_node(f"n{i}", GossipSub, p)
    rng = random.Random(seed)
    for i in range(n):
        for j in rng.sample([x for x in range(n) if x != i], degree // 2):
            net.connect(f"n{i}", f"n{j}")
    net.run(until=0.5)
    for i in range(n):
        net.nodes[f"n{i}"].core.subscribe("t")
    return net


def mesh_sizes(net, topic="t"):
    return [len(node.core.mesh.get(topic, ())) for node in net.nodes.values()]


def test_mesh_degrees_converge_into_bounds():
    net = network(n=40, degree=16, D=6, D_lo=4, D_hi=12)
    net.run(until=8)  # several heartbeats
    sizes = mesh_sizes(net)
    assert all(4 <= s <= 12 for s in sizes), sizes
    # meshes are symmetric once settled: a GRAFT is accepted or answered with PRUNE
    for node in net.nodes.values():
        for peer in node.core.mesh["t"]:
            assert node.node_id in net.nodes[peer].core.mesh["t"]


def test_every_subscriber_gets_the_message_once():
    net = network(n=30, degree=10)
    net.run(until=5)
    msg_id = net.nodes["n0"].core.publish("t", b"x" * 2000)
    net.run(until=8)
    got = {e["node"] for e in net.events("deliver_message") if e["msg_id"] == msg_id}
    assert got == {f"n{i}" for i in range(1, 30)}


def test_graft_during_backoff_is_pruned_and_penalised():
    net = network(n=3, degree=4)
    net.run(until=3)
    a = net.nodes["n0"].core
    a.backoff[("t", "n1")] = net.now + 60
    a.last_prune[("t", "n1")] = net.now
    a.mesh["t"].discard("n1")
    a.on_frame("n1", RPC(control=ControlMessage(graft=[ControlGraft(topicID="t")])).SerializeToString())
    assert "n1" not in a.mesh["t"]
    assert a.score.penalty("n1") == 2  # inside the graft-flood threshold: double
    net.run(until=5)  # the PRUNE goes out with the heartbeat
    prunes = [e for e in net.nodes["n0"].events if e["type"] == "send_rpc" and e["peer"] == "n1" and e.get("prune")]
    assert prunes


def test_ihave_iwant_recovers_a_message_missed_on_the_mesh():
    net = network(n=8, degree=6, flood_publish=False, D=2, D_lo=1, D_hi=3, D_lazy=7, D_out=0)
    net.run(until=4)
    pub = net.nodes["n0"].core
    outside = sorted(set(pub.peer_topics) - pub.mesh["t"])
    assert outside, "need a neighbour outside n0's mesh"
    target = outside[0]
    # cut the target off every mesh so only gossip can reach it
    for node in net.nodes.values():
        node.core.mesh["t"].discard(target)
        node.core.backoff.update({("t", target): net.now + 600})
    net.nodes[target].core.mesh["t"].clear()
    net.nodes[target].core.backoff.update({("t", p): net.now + 600 for p in net.nodes[target].core.peer_topics})
    msg_id = pub.publish("t", b"y" * 500)
    net.run(until=net.now + 3)
    events = net.nodes[target].events
    assert any(e["type"] == "deliver_message" and e["msg_id"] == msg_id for e in events)
    assert any(e["type"] == "send_rpc" and e.get("iwant") for e in events)


def test_idontwant_stops_the_relay_to_that_peer():
    net = network(n=3, degree=4, idontwant=True)
    net.run(until=3)
    relay = net.nodes["n1"].core
    assert {"n0", "n2"} <= relay.mesh["t"]
    msg = authored(net, "n0", 77, "t", b"z" * 5000)
    msg_id = "n0-77"
    relay.on_frame("n2", RPC(control=ControlMessage(idontwant=[ControlIDontWant(messageIDs=wire_ids(net, msg_id))])).SerializeToString())
    before = len(net.nodes["n1"].events)
    relay.on_frame("n0", RPC(publish=[msg]).SerializeToString())
    sent = [e for e in net.nodes["n1"].events[before:] if e["type"] == "send_rpc" and e.get("msgs")]
    assert [e["peer"] for e in sent] == []  # n0 is the sender, n2 said it does not want it
    # and the relay itself announced IDONTWANT to its other mesh peer (n2), before validation
    assert any(e["type"] == "send_rpc" and e.get("idontwant") and e["peer"] == "n2" for e in net.nodes["n1"].events[before:])


def test_iwant_is_not_served_after_idontwant():
    net = network(n=3, degree=4)
    net.run(until=3)
    core = net.nodes["n0"].core
    msg_id = core.publish("t", b"q" * 3000)
    core.on_frame("n1", RPC(control=ControlMessage(idontwant=[ControlIDontWant(messageIDs=wire_ids(net, msg_id))])).SerializeToString())
    from node.protocols.pubsub.pubsub_pb2 import ControlIWant
    before = len(net.nodes["n0"].events)
    core.on_frame("n1", RPC(control=ControlMessage(iwant=[ControlIWant(messageIDs=wire_ids(net, msg_id))])).SerializeToString())
    assert not [e for e in net.nodes["n0"].events[before:] if e["type"] == "send_rpc" and e.get("msgs")]


def test_rpc_size_limit_is_enforced():
    net = network(n=2, degree=2, max_rpc_size=10_000)
    core = net.nodes["n0"].core
    core.on_frame("n1", RPC(publish=[authored(net, "n1", 1, "t", b"a" * 20_000)]).SerializeToString())
    assert [e["reason"] for e in net.nodes["n0"].events if e["type"] == "drop_rpc"] == ["oversized"]
    assert not net.events("deliver_message")


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_malformed_frames_never_crash_the_router(data):
    net = network(n=2, degree=2, variant="all-3")
    net.nodes["n0"].core.on_frame("n1", data)


def test_fragments_are_reassembled_and_verified():
    net = network(n=12, degree=6, variant="fragment-4")
    net.run(until=4)
    payload = random.Random(1).randbytes(100_000)
    whole = net.nodes["n3"].core.publish("t", payload)
    net.run(until=8)
    assert len([e for e in net.nodes["n3"].events if e["type"] == "publish_fragment"]) == 4
    for i in range(12):
        if i == 3:
            continue
        node = net.nodes[f"n{i}"]
        assert [d.data for d in node.delivered if d.msg_id == whole] == [payload]
        assert len([e for e in node.events if e["type"] == "deliver_fragment" and e["whole_id"] == whole]) == 4


def test_staggering_sends_one_peer_at_a_time():
    net = network(n=10, degree=9, variant="stagger-seq", stagger_interval=0.2, D=6, D_lo=4, D_hi=8,
                  latency=0.05)
    net.run(until=4)
    pub = net.nodes["n0"]
    start = len(pub.events)
    pub.core.publish("t", b"s" * 50_000)
    net.run(until=net.now + 0.01)
    first = [e for e in pub.events[start:] if e["type"] == "send_rpc" and e.get("msgs")]
    assert len(first) == 1  # just one peer so far
    net.run(until=net.now + 5)
    got = {e["node"] for e in net.events("deliver_message")}
    assert got == {f"n{i}" for i in range(1, 10)}
    assert net.events("stagger_skip")  # IDONTWANTs arrived before some sends and saved them


def test_variant_presets_and_explicit_values():
    assert GossipSubParams(variant="v1.1").idontwant is False
    p = GossipSubParams(variant="all-3")
    assert (p.idontwant, p.stagger_parallel, p.fragments) == (True, 3, 4)
    assert GossipSubParams(variant="all-3", fragments=2).fragments == 2
    with pytest.raises(ValueError):
        GossipSubParams(D=3, D_lo=4)
