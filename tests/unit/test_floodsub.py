"""FloodSub core on the deterministic in-memory network."""
import random

import pytest

from node.protocols.floodsub import FloodSub
from node.protocols.pubsub.wire import RPC, encode_rpc, make_message
from node.simulated.virtual_network import MemNetwork


def mesh(n: int, seed: int = 1, latency=0.01) -> MemNetwork:
    net = MemNetwork(seed=seed, latency=latency)
    for i in range(n):
        net.add_node(f"n{i}", FloodSub)
    for i in range(n):
        for j in range(i + 1, n):
            net.connect(f"n{i}", f"n{j}")
    return net


def test_message_reaches_every_subscriber_and_no_one_else():
    net = mesh(6)
    for i in (1, 2, 3, 5):
        net.nodes[f"n{i}"].core.subscribe("blocks")
    net.nodes["n4"].core.subscribe("other")
    net.run(until=1)
    msg_id = net.nodes["n0"].core.publish("blocks", b"x" * 100)
    net.run(until=2)
    for i in (1, 2, 3, 5):
        assert [d.msg_id for d in net.nodes[f"n{i}"].delivered] == [msg_id]
    assert net.nodes["n4"].delivered == [] and net.nodes["n0"].delivered == []
    # direct delivery from the publisher: one hop of 10 ms after publishing at t=1
    assert all(d.time == pytest.approx(1.01) for i in (1, 2, 3, 5) for d in net.nodes[f"n{i}"].delivered)


def test_duplicates_are_counted_not_delivered_twice():
    net = mesh(4)
    for i in range(4):
        net.nodes[f"n{i}"].core.subscribe("t")
    net.run(until=1)
    net.nodes["n0"].core.publish("t", b"hello")
    net.run(until=2)
    # each of n1..n3 relays to the two others: 6 duplicates in all
    assert len(net.events("duplicate_message")) == 6
    assert len(net.events("deliver_message")) == 3


def test_relay_over_a_line_adds_latency_per_hop():
    net = MemNetwork(seed=0, latency=0.05)
    for i in range(4):
        net.add_node(f"n{i}", FloodSub).core.subscribe("t")
    for i in range(3):
        net.connect(f"n{i}", f"n{i + 1}")
    net.run(until=1)
    net.nodes["n0"].core.publish("t", b"payload")
    net.run(until=3)
    times = [net.nodes[f"n{i}"].delivered[0].time for i in (1, 2, 3)]
    assert times == pytest.approx([1.05, 1.10, 1.15])


def test_unsubscribe_stops_delivery():
    net = mesh(3)
    for i in range(3):
        net.nodes[f"n{i}"].core.subscribe("t")
    net.run(until=1)
    net.nodes["n2"].core.unsubscribe("t")
    net.run(until=2)
    net.nodes["n0"].core.publish("t", b"a")
    net.run(until=3)
    assert len(net.nodes["n1"].delivered) == 1 and net.nodes["n2"].delivered == []


def test_malformed_and_self_originated_frames():
    net = mesh(2)
    for i in range(2):
        net.nodes[f"n{i}"].core.subscribe("t")
    net.run(until=1)
    core = net.nodes["n1"].core
    core.on_frame("n0", b"\xff\xff\xff")
    core.on_frame("n0", encode_rpc(RPC(publish=[make_message("n1", 9, "t", b"mine")])))
    reasons = [e.get("reason") for e in net.nodes["n1"].events if e["type"] in ("drop_rpc", "reject_message")]
    assert reasons == ["malformed", "self origin"]
    assert net.nodes["n1"].delivered == []


def test_same_seed_same_events():
    def run(seed):
        net = mesh(5, seed=seed, latency=lambda a, b: 0.01 * (1 + (int(a[1:]) * 7 + int(b[1:])) % 5))
        for i in range(5):
            net.nodes[f"n{i}"].core.subscribe("t")
        net.run(until=1)
        rng = random.Random(seed)
        for k in range(10):
            net.nodes[f"n{rng.randrange(5)}"].core.publish("t", bytes([k]) * 50)
            net.run(until=1 + 0.1 * (k + 1))
        net.run(until=5)
        return net.events()
    assert run(1) == run(1)


def test_crashed_node_gets_nothing():
    net = mesh(3)
    for i in range(3):
        net.nodes[f"n{i}"].core.subscribe("t")
    net.run(until=1)
    net.crash("n2")
    net.nodes["n0"].core.publish("t", b"a")
    net.run(until=2)
    assert net.nodes["n2"].delivered == [] and len(net.nodes["n1"].delivered) == 1
