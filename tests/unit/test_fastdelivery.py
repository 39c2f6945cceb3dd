"""FastDelivery core on the in-memory network: groups found on rendezvous boards, premium members
served directly or through one helper, every matching event delivered exactly once, and a helper's
failure repaired by the publisher."""
from __future__ import annotations

import random

import pytest

from node.protocols import Unsupported
from node.protocols.content.predicates import Predicate, group_predicates
from node.protocols.fastdelivery.core import FastDelivery, FastDeliveryParams
from node.simulated.virtual_network import MemNetwork
from tests.support.dht_net import dht_network

FILTERS = ["ipfs T", "surf T/bali T/trip T/price R 1000 1500", "surf T/price R 0 800", "bali T/trip T",
           "ipfs T/year R 2020 2022"]
EVENTS = ["ipfs T/year R 2021 2021", "ipfs T/year R 2030 2030", "surf T/bali T/trip T/price R 1200 1200",
          "surf T/bali T/trip T/price R 1600 1600", "surf T/price R 500 500", "bali T/trip T"]
PUBLISHERS = ["n0", "n1", "n2"]


def network(n: int = 40, seed: int = 3, **params) -> MemNetwork:
    p = FastDeliveryParams(**{"rpc_timeout": 1.0, "dial_timeout": 1.0, "search_refresh": 2.0, **params})
    return dht_network(FastDelivery, p, n, seed)


def setup_groups(net: MemNetwork, seed: int = 1, per_filter: int = 8) -> dict[str, list[str]]:
    """Every publisher creates the groups covering all EVENTS; subscribers take FILTERS."""
    for p in PUBLISHERS:
        for g in group_predicates(EVENTS):
            net.nodes[p].core.create_topic(g)
    rng = random.Random(seed)
    others = sorted((x for x in net.nodes if x not in PUBLISHERS), key=lambda x: int(x[1:]))
    subs = {}
    for f in FILTERS:
        subs[f] = rng.sample(others, per_filter)
        for x in subs[f]:
            net.nodes[x].core.subscribe(f)
    net.run(until=net.now + 12)
    return subs


def matching(subs: dict[str, list[str]], event: str, alive: set[str] | None = None) -> set[str]:
    ev = Predicate.parse(event)
    return {x for f, xs in subs.items() if Predicate.parse(f).matches(ev) for x in xs
            if alive is None or x in alive}


def got(net: MemNetwork, msg_id: str) -> list[str]:
    return [x for x, node in net.nodes.items() for d in node.delivered if d.msg_id == msg_id]


def publish_all(net: MemNetwork, rounds: int = 2) -> list[tuple[str, str]]:
    sent = []
    for i, event in enumerate(EVENTS * rounds):
        publisher = PUBLISHERS[i % len(PUBLISHERS)]
        sent.append((event, net.nodes[publisher].core.publish(event, b"x" * 64)))
        net.run(until=net.now + 0.2)
    net.run(until=net.now + 5)
    return sent


def test_every_matching_subscriber_gets_each_event_exactly_once():
    net = network()
    subs = setup_groups(net)
    acked = [e for e in net.events("subscribed")]
    assert len(acked) == sum(len(xs) for xs in subs.values())  # every premium subscription acknowledged
    assert all(e["delay_ms"] > 0 for e in acked)
    for event, msg_id in publish_all(net):
        receivers = got(net, msg_id)
        assert sorted(receivers) == sorted(matching(subs, event)), event  # each once, nobody else
    assert net.events("duplicate_message") == []


def test_a_crowded_region_recruits_helpers_and_events_take_at_most_two_hops():
    net = network(50, region_limit=3, capacity=4)
    subs = setup_groups(net, per_filter=10)
    recruited = net.events("helper")
    assert recruited and all(e["reason"] == "recruited" for e in recruited)
    core = net.nodes["n0"].core
    for g in core.groups.values():
        for h, served in g.helpers.items():
            assert 0 < len(served) <= 4 and h in g.members
            assert all(g.members[m].helper == h for m in served)
        direct = [m for m, j in g.members.items() if not j.helper and m not in g.helpers]
        assert len(direct) <= 3
    before = {x: len(n.delivered) for x, n in net.nodes.items()}
    sent = publish_all(net)
    for event, msg_id in sent:
        assert sorted(got(net, msg_id)) == sorted(matching(subs, event)), event
    # at most two hops: every delivery came from the publisher or from a helper it recruited
    helpers = {h for p in PUBLISHERS for g in net.nodes[p].core.groups.values() for h in g.helpers}
    for x, node in net.nodes.items():
        for d in node.delivered[before[x]:]:
            relay = [e["peer"] for e in node.events if e["type"] == "deliver_message" and e["msg_id"] == d.msg_id]
            assert relay[0] == d.origin or relay[0] in helpers
    assert net.events("duplicate_message") == []


def test_a_failed_helper_returns_its_members_to_the_publisher_and_nothing_is_lost():
    net = network(50, region_limit=3, capacity=4)
    subs = setup_groups(net, per_filter=10)
    group = net.nodes["n0"].core.groups[str(Predicate.parse("ipfs T/year R 2021 2030"))]
    helper, served = sorted(group.helpers.items())[0]
    in_flight = net.nodes["n0"].core.publish("ipfs T/year R 2021 2021", b"y")  # relayed by the helper...
    assert group.unrelayed[helper]
    net.crash(helper)                                                        # ...which dies first
    alive = set(net.nodes) - {helper}
    sent = [("ipfs T/year R 2021 2021", in_flight)] + publish_all(net)
    net.run(until=net.now + 10)
    failed = [e for e in net.events("helper") if e["reason"] == "failed" and e["peer"] == helper]
    assert failed and failed[0]["node"] == "n0"
    assert not any(g.members.get(m) and g.members[m].helper == helper
                   for p in PUBLISHERS for g in net.nodes[p].core.groups.values() for m in served)
    for event, msg_id in sent:
        assert set(got(net, msg_id)) == matching(subs, event, alive), event


def test_groups_advertised_later_are_found_and_unsubscribe_cancels():
    net = network(30)
    x = "n7"
    net.nodes[x].core.subscribe("ipfs T")
    net.run(until=net.now + 5)
    net.nodes["n0"].core.create_topic("ipfs T/year R 1 9")
    net.run(until=net.now + 8)  # the next search finds it
    assert "n7" in net.nodes["n0"].core.groups["ipfs T/year R 1 9"].members
    msg = net.nodes["n0"].core.publish("ipfs T/year R 3 3", b"e")
    net.run(until=net.now + 2)
    assert got(net, msg) == ["n7"]
    net.nodes[x].core.unsubscribe("ipfs T")
    net.run(until=net.now + 2)
    assert "n7" not in net.nodes["n0"].core.groups["ipfs T/year R 1 9"].members
    msg = net.nodes["n0"].core.publish("ipfs T/year R 4 4", b"e")
    net.run(until=net.now + 2)
    assert got(net, msg) == []


def test_publishing_outside_every_group_says_how_to_fix_it():
    net = network(5)
    with pytest.raises(Unsupported, match="no multicast group covering 'ipfs T/year R 5 5'.*create_topic"):
        net.nodes["n0"].core.publish("ipfs T/year R 5 5", b"x")
