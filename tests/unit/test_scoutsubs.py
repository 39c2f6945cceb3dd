"""ScoutSubs core on the in-memory network: predicate subscriptions routed to attribute rendezvous,
events delivered to exactly the matching subscribers, duplicates counted, and the reliable variant
delivering everything when nodes on the routes die between subscribing and publishing."""
from __future__ import annotations

import random

import pytest

from node.protocols.content.predicates import Predicate
from node.protocols.scoutsubs.core import ScoutSubs, ScoutSubsParams
from node.simulated.virtual_network import MemNetwork
from tests.support.dht_net import dht_network

FILTERS = ["ipfs T", "surf T/bali T/trip T/price R 1000 1500", "surf T/price R 0 800", "bali T",
           "ipfs T/year R 2020 2022"]
EVENTS = ["ipfs T/year R 2021 2021", "surf T/bali T/trip T/price R 1200 1200", "surf T/price R 500 500",
          "bali T/trip T", "ipfs T/year R 2030 2030", "surf T/bali T/trip T/price R 1600 1600"]


def network(n: int, seed: int = 5, **params) -> MemNetwork:
    p = ScoutSubsParams(**{"rpc_timeout": 1.0, "dial_timeout": 1.0, "op_resend": 2.0, "check_delivery": 3.0,
                           **params})
    return dht_network(ScoutSubs, p, n, seed)


def subscribe_groups(net: MemNetwork, seed: int = 1) -> dict[str, list[str]]:
    rng = random.Random(seed)
    nodes = sorted(net.nodes, key=lambda x: int(x[1:]))
    groups = {}
    for f in FILTERS:
        groups[f] = rng.sample(nodes[1:], 6)
        for x in groups[f]:
            net.nodes[x].core.subscribe(f)
    net.run(until=net.now + 10)
    return groups


def matching(groups: dict[str, list[str]], event: str, publisher: str, alive=None) -> set[str]:
    ev = Predicate.parse(event)
    want = {x for f, xs in groups.items() if Predicate.parse(f).matches(ev) for x in xs}
    return {x for x in want if x != publisher and (alive is None or x in alive)}


def publish_events(net: MemNetwork, step: int) -> list[tuple[str, str, str]]:
    """EVENTS twice, by publishers `step` apart, 0.3 s between; (event, publisher, msg_id) each."""
    sent = []
    for i, event in enumerate(EVENTS * 2):
        publisher = f"n{(i * step) % len(net.nodes)}"
        sent.append((event, publisher, net.nodes[publisher].core.publish(event, b"x" * 100)))
        net.run(until=net.now + 0.3)
    net.run(until=net.now + 10)
    return sent


def got(net: MemNetwork, msg_id: str) -> set[str]:
    return {x for x, node in net.nodes.items() for d in node.delivered if d.msg_id == msg_id}


VARIANTS = [{"reliable": r, "redirect": d} for d in (False, True) for r in (False, True)]  # the paper's four


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ("redirect" if v["redirect"] else "base")
                         + ("-reliable" if v["reliable"] else "-unreliable"))
def test_events_reach_exactly_the_matching_subscribers(variant):
    net = network(40, **variant)
    groups = subscribe_groups(net)
    sent = publish_events(net, 7)
    for event, publisher, msg_id in sent:
        assert got(net, msg_id) == matching(groups, event, publisher), event
    delivered = sum(len(n.delivered) for n in net.nodes.values())
    dups = sum(1 for n in net.nodes.values() for e in n.events if e["type"] == "duplicate_message")
    assert delivered > 40 and dups <= delivered  # copies via a second rendezvous are logged, not delivered
    # nothing delivered twice to the app
    for node in net.nodes.values():
        ids = [d.msg_id for d in node.delivered]
        assert len(ids) == len(set(ids))


@pytest.mark.parametrize("reliable", [False, True])
def test_a_publisher_on_a_subscribers_route_still_reaches_it(reliable):
    net = network(60, reliable=reliable, k=3)  # small buckets: routes of several hops
    for sub in (f"n{i}" for i in range(60)):  # a subscriber whose first hop is not the rendezvous
        net.nodes[sub].core.subscribe("bali T/trip T")
        net.run(until=net.now + 5)
        attr = net.nodes[sub].core.mine["bali T/trip T"].attr
        relays = [x for x, n in net.nodes.items() if sub in n.core.filters and n.core.sent_up.get(attr)]
        if relays:
            break
        net.nodes[sub].core.unsubscribe("bali T/trip T")
    # the relay publishes: its event goes up to the rendezvous, which must send it back down to it
    msg_id = net.nodes[relays[0]].core.publish("bali T/trip T", b"z")
    net.run(until=net.now + 10)
    assert sub in got(net, msg_id)


def test_reliable_subscriptions_are_acknowledged_with_their_latency():
    net = network(30)
    net.nodes["n3"].core.subscribe("surf T/price R 0 800")
    net.run(until=net.now + 5)
    (ev,) = [e for e in net.nodes["n3"].events if e["type"] == "subscribed"]
    assert ev["topic"] == "price R 0 800/surf T" and 0 < ev["delay_ms"] < 2000


def test_hops_store_filters_under_the_route_merging_where_safe():
    net = network(30)
    sub = "n4"
    net.nodes[sub].core.subscribe("surf T/price R 0 10")
    net.nodes[sub].core.subscribe("surf T/price R 5 20")
    net.run(until=net.now + 5)
    holders = [(x, n.core.filters[sub]) for x, n in net.nodes.items() if sub in n.core.filters]
    assert holders, "the first hop keeps the subscriber as a route"
    for _, entry in holders:
        assert [str(f) for f in entry] in (["price R 0 20/surf T"], ["surf T"])  # merged hull (or one attr)


@pytest.mark.parametrize("redirect", [False, True])
def test_reliable_variant_delivers_everything_when_subscribers_on_routes_die(redirect):
    net = network(50, reliable=True, redirect=redirect)
    groups = subscribe_groups(net, seed=2)
    # kill two subscribers that other subscriptions route through (their tables hold routes)
    subscribers = {x for xs in groups.values() for x in xs}
    relays = sorted((x for x in subscribers if net.nodes[x].core.filters), key=lambda x: -len(net.nodes[x].core.filters))
    victims = relays[:2]
    for v in victims:
        net.crash(v)
    alive = {x for x, n in net.nodes.items() if n.up}
    sent = []
    for i, event in enumerate(EVENTS):
        publisher = f"n{i * 3}"
        if publisher in victims:
            publisher = "n1"
        sent.append((event, publisher, net.nodes[publisher].core.publish(event, b"y")))
    net.run(until=net.now + 40)
    for event, publisher, msg_id in sent:
        assert got(net, msg_id) == matching(groups, event, publisher, alive), (event, victims)
    # the publisher's re-sends stopped: every rendezvous acknowledged
    assert all(not net.nodes[p].core.publishing for _, p, _ in sent)


def _relays(net: MemNetwork) -> list[str]:
    """Nodes with one route and no filters of their own: what the redirect variant jumps over."""
    return [x for x, n in net.nodes.items() if not n.core.mine and len([r for r, fs in n.core._table().items() if fs]) == 1]


def test_redirect_jumps_over_pure_relays_and_a_new_branch_withdraws_the_shortcut():
    net = network(80, k=3, redirect=True)  # small buckets: routes of several hops
    first = "n10"
    net.nodes[first].core.subscribe("ipfs T")
    net.run(until=net.now + 8)
    relays = _relays(net)
    assert relays, "a route of several hops has relays"
    offered = {x: net.nodes[x].core.offered for x in relays}
    assert all(offered.values())  # each relay offers a shortcut upstream
    msg = net.nodes["n0"].core.publish("ipfs T", b"a")
    net.run(until=net.now + 3)
    assert got(net, msg) == {first}
    skipped = [x for x in relays if not any(k[0] == msg for k in net.nodes[x].core.dispatches)]
    assert skipped, "the event went over the relays, not through them"
    # a second subscriber whose route joins at a relay: that relay becomes a branch point
    for other in (f"n{i}" for i in range(20, 80)):
        net.nodes[other].core.subscribe("ipfs T")
        net.run(until=net.now + 5)
        if any(len([r for r, fs in net.nodes[x].core._table().items() if fs]) > 1 for x in relays):
            break
        net.nodes[other].core.unsubscribe("ipfs T")
    else:
        pytest.fail("no subscriber's route joined a relay")
    branch = [x for x in relays if len(net.nodes[x].core._table()) > 1]
    assert all(net.nodes[x].core.offered == "" for x in branch)  # withdrawn
    msg = net.nodes["n0"].core.publish("ipfs T", b"b")
    net.run(until=net.now + 3)
    assert got(net, msg) == {first, other}


@pytest.mark.slow
def test_redirect_sends_fewer_event_messages_on_long_routes():
    counts = {}
    for redirect in (False, True):
        net = network(80, k=3, redirect=redirect)
        groups = subscribe_groups(net, seed=4)
        sent = publish_events(net, 11)
        for event, publisher, msg_id in sent:
            assert got(net, msg_id) == matching(groups, event, publisher), (redirect, event)
        counts[redirect] = sum(e.get("msgs", 0) for e in net.events("recv_rpc"))
    print("event messages received, base vs redirect:", counts)
    assert counts[True] < counts[False], counts


def test_refreshes_keep_every_route_across_table_swaps():
    # a relay whose filter was already sent up must still send the refresh up once per table period,
    # or its upstream's next table forgets the route and, at the upstream's swap, the branch goes dark
    net = network(50, k=3, sub_refresh=10.0)
    groups = subscribe_groups(net, seed=3)
    for t in (21, 31, 41, 51):  # just after each refresh (swaps at 20 and 40)
        net.run(until=t)
        for x, node in net.nodes.items():
            for attr, hop in node.core.up_via.items():
                if node.core.sent_up.get(attr) and net.nodes[hop].up:
                    assert x in net.nodes[hop].core.next_filters, (t, x, attr, hop)
    sent = publish_events(net, 5)
    for event, publisher, msg_id in sent:
        assert got(net, msg_id) == matching(groups, event, publisher), event
