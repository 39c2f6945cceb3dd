"""The static-overlay core's TTL gossip on the in-memory network (Topiary's dissemination: the
TTL rules are checked on both cores)."""
import pytest

from node.protocols.overlays.static import StaticOverlay, StaticOverlayParams
from node.protocols.topiary.core import Topiary
from node.simulated.virtual_network import MemNetwork

CORES = pytest.mark.parametrize("core", [StaticOverlay, Topiary])


def line(n, subscribed, ttl=1, core=StaticOverlay):
    """n0 - n1 - ... - n(n-1); `subscribed` nodes join topic t."""
    net = MemNetwork(seed=1, latency=0.01)
    for i in range(n):
        node = net.add_node(f"n{i}", core, core.Params(ttl=ttl))
        if i in subscribed:
            node.core.subscribe("t")
    for i in range(n - 1):
        net.connect(f"n{i}", f"n{i + 1}")
    net.run(until=1)
    return net


def delivered(net):
    """Nodes that received the message over the network (the publisher's own copy is not counted)."""
    return sorted({e["node"] for e in net.events("deliver_message")})


@CORES
def test_subscribers_pass_the_ttl_on_unchanged(core):
    net = line(5, subscribed={0, 1, 2, 3, 4}, ttl=0, core=core)
    net.nodes["n0"].core.publish("t", b"x")
    net.run(until=2)
    assert delivered(net) == ["n1", "n2", "n3", "n4"]


@CORES
def test_ttl_is_spent_at_non_subscribers(core):
    # n1 and n2 are not subscribed: TTL 1 crosses one of them, not two
    net = line(4, subscribed={0, 2, 3}, ttl=1, core=core)
    net.nodes["n0"].core.publish("t", b"x")
    net.run(until=2)
    assert delivered(net) == ["n2", "n3"]
    net = line(4, subscribed={0, 3}, ttl=1, core=core)
    net.nodes["n0"].core.publish("t", b"x")
    net.run(until=2)
    assert delivered(net) == []
    # n1 spent the TTL; at 0 it relays only to interested neighbours, and n2 is not one
    assert not [e for e in net.nodes["n1"].events if e["type"] == "send_rpc" and e["msgs"]]


@CORES
def test_a_non_subscriber_drops_a_message_that_reaches_it_at_ttl_zero(core):
    net = line(3, subscribed={0, 2}, ttl=0, core=core)
    core = net.nodes["n1"].core
    from node.protocols.overlays.gossip_pb2 import GossipMessage, GossipRPC
    core.on_frame("n0", GossipRPC(messages=[GossipMessage(origin="n0", seqno=5, topic="t", ttl=0)]).SerializeToString())
    assert [e["reason"] for e in net.events("reject_message")] == ["ttl expired"]


def test_ttl_zero_goes_only_to_interested_neighbours():
    net = MemNetwork(seed=1, latency=0.01)
    for i in range(4):
        net.add_node(f"n{i}", StaticOverlay, StaticOverlayParams(ttl=0))
    for i in (0, 1, 3):
        net.nodes[f"n{i}"].core.subscribe("t")
    for j in (1, 2, 3):  # star around n0
        net.connect("n0", f"n{j}")
    net.run(until=1)
    net.nodes["n0"].core.publish("t", b"x")
    net.run(until=2)
    assert delivered(net) == ["n1", "n3"]
    sent_to = [e["peer"] for e in net.nodes["n0"].events if e["type"] == "send_rpc" and e["msgs"] == 1]
    assert sorted(sent_to) == ["n1", "n3"]


def test_duplicates_on_a_cycle():
    net = MemNetwork(seed=1, latency=0.01)
    for i in range(3):
        net.add_node(f"n{i}", StaticOverlay).core.subscribe("t")
    for a, b in (("n0", "n1"), ("n1", "n2"), ("n2", "n0")):
        net.connect(a, b)
    net.run(until=1)
    net.nodes["n0"].core.publish("t", b"x")
    net.run(until=2)
    assert delivered(net) == ["n1", "n2"]
    assert len(net.events("duplicate_message")) == 2
