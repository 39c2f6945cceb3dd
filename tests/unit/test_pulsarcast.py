"""PulsarCast core on the in-memory network: descriptors, trees toward the author without cycles
(under random joins and failures), publish along the tree, request to publish, leave, repair, and
history rebuild from the DHT."""
from __future__ import annotations

import random

import pytest

from node.protocols.dht.table import node_key
from node.protocols.pulsarcast.core import PulsarCast, PulsarCastParams, descriptor_id
from node.protocols.pulsarcast.pulsarcast_pb2 import EventDescriptor
from node.simulated.virtual_network import MemNetwork
from tests.support.dht_net import dht_network


def network(n: int, seed: int = 3, **params) -> MemNetwork:
    return dht_network(PulsarCast, PulsarCastParams(**{"rpc_timeout": 1.0, "dial_timeout": 1.0, **params}), n, seed)


def core(net: MemNetwork, node: str) -> PulsarCast:
    return net.nodes[node].core


def tree_of(net: MemNetwork, topic: str) -> dict[str, str | None]:
    """node -> its parent in the topic's tree, for live nodes in it."""
    out = {}
    for x, node in net.nodes.items():
        if not node.up:
            continue
        c = node.core
        tid = c.names.get(topic) or next((t for t, tr in c.trees.items() if tr.topic.name == topic), None)
        if tid and tid in c.trees:
            out[x] = c.trees[tid].parent
    return out


def assert_tree(net: MemNetwork, topic: str, author: str, members: set[str]) -> None:
    """Every member reaches the author by parent links, distance to the author falls at every step,
    and parent/child records agree."""
    parents = tree_of(net, topic)
    target = node_key(author)
    for m in members:
        hops, x = 0, m
        while x != author:
            p = parents.get(x)
            assert p is not None, f"{x} (on the way from {m}) has no parent"
            assert node_key(p) ^ target < node_key(x) ^ target, f"{x} -> {p} does not get closer"
            tid = core(net, p).names.get(topic) or next(t for t, tr in core(net, p).trees.items()
                                                        if tr.topic.name == topic)
            assert x in core(net, p).trees[tid].children, f"{p} does not list {x} as a child"
            x, hops = p, hops + 1
            assert hops <= len(parents)


def with_topic(net: MemNetwork, subs: list[str], settle: float) -> None:
    """n0 authors topic t; `subs` subscribe; the trees form for `settle` seconds."""
    core(net, "n0").create_topic("t")
    net.run(until=net.now + 2)
    for s in subs:
        core(net, s).subscribe("t")
    net.run(until=net.now + settle)


def delivered(net: MemNetwork, node: str, topic: str) -> list[str]:
    return [d.msg_id for d in net.nodes[node].delivered if d.topic == topic]


def test_descriptors_are_content_addressed_and_immutable():
    net = network(10)
    tid = core(net, "n0").create_topic("news")
    net.run(until=net.now + 5)
    topic = core(net, "n0").store[tid]
    assert descriptor_id(topic) == tid and topic.author == "n0"
    meta_id = next(s.id for s in topic.sub_topics if s.name == "meta")
    assert core(net, "n0").store[meta_id].name == "news/meta"
    # another node finds the name, then the descriptor, through the DHT
    core(net, "n7").subscribe("news")
    net.run(until=net.now + 5)
    assert core(net, "n7").names["news"] == tid
    assert core(net, "n7").store[tid] == topic


@pytest.mark.slow
def test_subscribers_get_every_event_over_an_acyclic_tree():
    net = network(60)
    subs = [f"n{i}" for i in range(1, 60, 2)]
    with_topic(net, subs, 10)
    assert_tree(net, "t", "n0", set(subs))
    ids = [core(net, "n0").publish("t", f"e{i}".encode()) for i in range(20)]
    net.run(until=net.now + 5)
    for s in subs:
        assert sorted(delivered(net, s, "t")) == sorted(ids), s
    # forwarders that did not subscribe keep the tree but deliver nothing
    for x in set(tree_of(net, "t")) - set(subs) - {"n0"}:
        assert delivered(net, x, "t") == []
    dups = sum(1 for n in net.nodes.values() for e in n.events if e["type"] == "duplicate_message")
    assert dups == 0  # a tree sends each event once over each edge


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trees_stay_acyclic_under_random_joins_and_failures(seed):
    rng = random.Random(seed)
    net = network(50, seed=seed)
    core(net, "n0").create_topic("t")
    net.run(until=net.now + 2)
    members: set[str] = set()
    for _ in range(6):
        for s in rng.sample([f"n{i}" for i in range(1, 50)], 6):
            if net.nodes[s].up:
                core(net, s).subscribe("t")
                members.add(s)
        net.run(until=net.now + rng.uniform(0.05, 2))
        victims = rng.sample(sorted(x for x in net.nodes if x != "n0" and net.nodes[x].up), 3)
        for v in victims:
            net.crash(v)
            members.discard(v)
        net.run(until=net.now + rng.uniform(0.05, 1))
    net.run(until=net.now + 20)  # repair: retries, then JOIN through the next closest peer
    assert_tree(net, "t", "n0", members)
    eid = core(net, "n0").publish("t", b"after the storm")
    net.run(until=net.now + 5)
    for s in members:
        assert eid in delivered(net, s, "t"), s


def test_a_node_not_allowed_to_publish_requests_and_the_author_republishes():
    net = network(30)
    with_topic(net, ["n3", "n4", "n5", "n6"], 5)
    msg_id = core(net, "n3").publish("t", b"please")
    net.run(until=net.now + 5)
    for s in ("n4", "n5", "n6"):
        assert delivered(net, s, "t") == [msg_id]
    event = next(e for e in core(net, "n4").store.values() if isinstance(e, EventDescriptor) and e.request == msg_id)
    assert event.publisher == "n0" and event.author == "n3"


def test_with_request_to_publish_off_a_stranger_cannot_publish():
    net = network(20, request_to_publish=False)
    core(net, "n0").create_topic("t")
    net.run(until=net.now + 2)
    core(net, "n4").subscribe("t")
    net.run(until=net.now + 5)
    core(net, "n5").publish("t", b"x")
    net.run(until=net.now + 5)
    assert delivered(net, "n4", "t") == []
    assert any(e["type"] == "reject_message" and e["reason"] == "not an allowed publisher"
               for e in net.nodes["n5"].events)


def test_everyone_publishes_and_last_seen_links_events():
    net = network(40, publishers="everyone")
    subs = [f"n{i}" for i in range(1, 40, 3)]
    with_topic(net, subs, 8)
    ids = []
    for i, s in enumerate(subs[:5]):
        ids.append(core(net, s).publish("t", f"from {s}".encode()))
        net.run(until=net.now + 1)
    for s in subs:
        got = set(delivered(net, s, "t"))
        assert got >= set(ids) - {ids[subs.index(s)] if subs.index(s) < 5 else None}
    # published one second apart: each event's parent is the previous one (a chain)
    events = {e.request: e for e in core(net, subs[-1]).store.values() if isinstance(e, EventDescriptor)
              and e.request in ids}
    by_id = {descriptor_id(e): e.request for e in events.values()}
    assert [by_id.get(events[m].parent, "") for m in ids[1:]] == ids[:-1]


def test_custom_linking_takes_the_callers_parent():
    net = network(15, event_linking="custom")
    author = core(net, "n0")
    author.create_topic("t")
    net.run(until=net.now + 2)
    core(net, "n2").subscribe("t")
    net.run(until=net.now + 5)
    author.publish("t", b"root")
    net.run(until=net.now + 1)
    root = author.trees[author.names["t"]].last_seen
    author.publish("t", b"reply", parent=root)
    author.publish("t", b"unlinked")
    net.run(until=net.now + 2)
    parents = {e.payload: e.parent for e in core(net, "n2").store.values() if isinstance(e, EventDescriptor)
               and e.name == "t"}
    assert parents == {b"root": "", b"reply": root, b"unlinked": ""}


def test_leave_prunes_forwarders_and_the_leaver_gets_nothing():
    net = network(40)
    core(net, "n0").create_topic("t")
    net.run(until=net.now + 2)
    core(net, "n9").subscribe("t")
    net.run(until=net.now + 5)
    path = tree_of(net, "t")
    assert "n9" in path
    core(net, "n9").unsubscribe("t")
    net.run(until=net.now + 3)
    left = tree_of(net, "t")
    assert set(left) == {"n0"}  # forwarders with no child and no subscription left too
    core(net, "n0").publish("t", b"x")
    net.run(until=net.now + 2)
    assert delivered(net, "n9", "t") == []


def test_history_rebuild_returns_every_missed_event_to_a_restarted_subscriber():
    net = network(40, k=6)
    author = core(net, "n0")
    author.create_topic("t")
    net.run(until=net.now + 2)
    for s in ("n5", "n6", "n7"):
        core(net, s).subscribe("t")
    net.run(until=net.now + 5)
    before = [author.publish("t", f"a{i}".encode()) for i in range(5)]
    net.run(until=net.now + 2)
    net.crash("n5")
    missed = []
    for i in range(12):
        missed.append(author.publish("t", f"b{i}".encode()))
        net.run(until=net.now + 0.2)
    assert delivered(net, "n5", "t") == before
    net.restart("n5")
    events_before = len(net.nodes["n5"].events)
    for peer in ("n1", "n2"):
        net.connect("n5", peer)
    core(net, "n5").subscribe("t")
    net.run(until=net.now + 10)
    after = author.publish("t", b"c")
    net.run(until=net.now + 10)
    assert delivered(net, "n5", "t") == before + [after]
    recovered = [e["msg_id"] for e in net.nodes["n5"].events[events_before:] if e["type"] == "history_event"]
    assert sorted(recovered) == sorted(before + missed)  # a fresh process: all of the history
    walks = [e for e in net.nodes["n5"].events if e["type"] == "history"]
    assert len(walks) == 1 and walks[0]["reason"] == "gap: complete" and walks[0]["found"] == 17


def test_history_on_request_walks_the_local_store_first():
    net = network(20)
    author = core(net, "n0")
    author.create_topic("t")
    net.run(until=net.now + 2)
    core(net, "n3").subscribe("t")
    net.run(until=net.now + 5)
    for i in range(4):
        author.publish("t", f"{i}".encode())
    net.run(until=net.now + 2)
    core(net, "n3").history("t")
    net.run(until=net.now + 2)
    walk = [e for e in net.nodes["n3"].events if e["type"] == "history"][-1]
    assert walk["messages"] == 4 and walk["found"] == 0 and walk["reason"] == "request: complete"
    with pytest.raises(Exception, match="nothing to walk back"):
        core(net, "n9").history("t")
