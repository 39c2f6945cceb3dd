"""Kademlia core on the in-memory network: lookups find the true k closest, values are found where
they were stored, failed peers leave the tables, and the routing table keeps its invariants."""
from __future__ import annotations

import random

import pytest

from node.protocols.dht.core import DhtCore
from node.protocols.dht.kademlia import DhtParams
from node.protocols.dht.table import RoutingTable, content_key, node_key
from node.simulated.virtual_network import MemNetwork
from tests.support.dht_net import dht_network


def network(n: int, seed: int = 7, **params) -> MemNetwork:
    """n DHT nodes joining 50 ms apart, each bootstrapping from three earlier nodes."""
    return dht_network(DhtCore, DhtParams(**params), n, seed, settle=30.0, stagger=0.05)


def true_closest(net: MemNetwork, key: int, k: int, exclude: str) -> list[str]:
    return sorted((x for x in net.nodes if x != exclude), key=lambda x: node_key(x) ^ key)[:k]


@pytest.fixture(scope="module")
def net500() -> MemNetwork:
    return network(500)


@pytest.mark.slow  # the 500-node network forms in about 15 s
def test_lookups_return_the_true_k_closest_among_500(net500: MemNetwork):
    rng = random.Random(1)
    results: dict[int, list[str]] = {}
    asks = []
    for q in range(40):
        origin = f"n{rng.randrange(500)}"
        key = rng.getrandbits(256)
        asks.append((q, origin, key))
        net500.nodes[origin].core.dht.find_node(key, lambda found, q=q: results.__setitem__(q, found))
    net500.run(until=net500.now + 30)
    assert len(results) == 40
    for q, origin, key in asks:
        assert results[q] == true_closest(net500, key, 20, origin), f"lookup {q} from {origin}"


@pytest.mark.slow
def test_every_node_knows_its_own_closest_neighbours(net500: MemNetwork):
    # what bootstrap buys: the k closest to a node are in its table (routing to it ends there)
    misses = 0
    for node_id, node in net500.nodes.items():
        want = set(true_closest(net500, node_key(node_id), 5, node_id))
        misses += len(want - set(node.core.dht.table.peers()))
    assert misses == 0


def test_put_stores_at_the_k_closest_and_get_finds_it_anywhere():
    net = network(120, k=8)
    key = content_key("some descriptor")
    copies = []
    net.nodes["n5"].core.dht.put(key, b"value-1", copies.append)
    net.run(until=net.now + 10)
    assert copies == [8]
    holders = {x for x, node in net.nodes.items() if key in node.core.dht.values}
    assert holders == set(true_closest(net, key, 8, ""))
    got = {}
    for origin in ("n0", "n77", "n119"):
        net.nodes[origin].core.dht.get(key, lambda v, o=origin: got.__setitem__(o, v))
    missing = {}
    net.nodes["n3"].core.dht.get(content_key("never stored"), lambda v: missing.__setitem__("v", v))
    net.run(until=net.now + 10)
    assert got == {"n0": b"value-1", "n77": b"value-1", "n119": b"value-1"}
    assert missing == {"v": None}


def test_values_survive_their_holders_crashing_through_republish():
    net = network(60, k=4, republish_interval=20.0, rpc_timeout=1.0, dial_timeout=1.0)
    key = content_key("kept")
    net.nodes["n1"].core.dht.put(key, b"v")
    net.run(until=net.now + 5)
    first = sorted(x for x, node in net.nodes.items() if key in node.core.dht.values)
    for x in first[:3]:  # three of the four holders die; the last one re-stores at the new closest
        net.crash(x)
    net.run(until=net.now + 45)
    alive = {x for x, node in net.nodes.items() if node.up}
    holders = {x for x in alive if key in net.nodes[x].core.dht.values}
    want = set(sorted(alive - {""}, key=lambda x: node_key(x) ^ key)[:4])
    assert want <= holders
    got = []
    origin = next(x for x in sorted(alive) if x not in holders)
    net.nodes[origin].core.dht.get(key, got.append)
    net.run(until=net.now + 10)
    assert got == [b"v"]


def test_a_dead_peer_leaves_the_routing_table_after_a_failed_rpc():
    net = network(30, rpc_timeout=1.0, dial_timeout=1.0)
    victim = "n10"
    knowers = [x for x, node in net.nodes.items() if victim in node.core.dht.table]
    assert knowers
    net.crash(victim)
    for x in knowers:
        net.nodes[x].core.dht.find_node(node_key(victim), lambda _: None)
    net.run(until=net.now + 10)
    still = [x for x in knowers if victim in net.nodes[x].core.dht.table]
    assert still == []


def test_a_full_bucket_keeps_a_live_oldest_contact_and_spares_the_newcomer():
    own = node_key("me")
    table = RoutingTable(own, k=2)
    # peers that share a bucket: same highest differing bit
    peers = [f"p{i}" for i in range(2000)]
    by_bucket: dict[int, list[str]] = {}
    for p in peers:
        by_bucket.setdefault(table.index(node_key(p)), []).append(p)
    a, b, c = by_bucket[255][:3]
    assert table.seen(a) is None and table.seen(b) is None
    assert table.seen(c) == a           # full: ping the oldest
    assert c not in table and c in table.replacements[255]
    table.seen(a)                       # a answered: it becomes the freshest, c still waits
    assert table.buckets[255] == [b, a]
    table.remove(b)                     # b failed: the replacement takes its place
    assert table.buckets[255] == [a, c]


def test_a_value_put_while_the_network_forms_reaches_the_k_closest_of_the_formed_network():
    # n0 stores a value when it knows one peer; 80 nodes join after. Its re-puts move the value to
    # the k closest of the network as it is then, where every node's lookup finds it.
    net = MemNetwork(seed=3, latency=0.01)
    params = DhtParams(k=5)
    for i in range(2):
        net.add_node(f"n{i}", DhtCore, params)
    net.connect("n0", "n1")
    net.run(until=1.0)
    key = content_key("a topic name")
    net.nodes["n0"].core.dht.put(key, b"tid")
    rng = random.Random(4)
    for i in range(2, 80):
        net.add_node(f"n{i}", DhtCore, params)
        for j in rng.sample(range(2, i) if i > 4 else range(i), min(2, i - 2) or 1):
            net.connect(f"n{i}", f"n{j}")
        net.run(until=net.now + 0.05)
    net.run(until=net.now + 130)
    holders = {x for x, node in net.nodes.items() if key in node.core.dht.values}
    assert set(true_closest(net, key, 5, "")) <= holders
    found = {}
    for x in ("n10", "n40", "n79"):
        net.nodes[x].core.dht.get(key, lambda v, x=x: found.__setitem__(x, v))
    net.run(until=net.now + 5)
    assert found == {"n10": b"tid", "n40": b"tid", "n79": b"tid"}


def test_a_put_that_finds_fewer_than_k_nodes_is_made_again_with_backoff_then_stops():
    net = MemNetwork(seed=1, latency=0.01)
    for i in range(3):
        net.add_node(f"n{i}", DhtCore, DhtParams(k=5))
    net.connect("n0", "n1")
    net.connect("n0", "n2")
    net.run(until=1.0)
    start = net.now
    net.nodes["n0"].core.dht.put(content_key("v"), b"v")
    net.run(until=start + 300)
    lookups = [e["ts"] / 1e9 - start for e in net.nodes["n0"].events if e["type"] == "dht_lookup"
               and e["ts"] / 1e9 >= start]
    # the put's lookup, then one per re-put: 2, 4, 8, 16, 32, 64 s apart (three nodes never make k)
    assert len(lookups) == 7
    gaps = [round(b - a) for a, b in zip(lookups, lookups[1:])]
    assert gaps == [2, 4, 8, 16, 32, 64]
