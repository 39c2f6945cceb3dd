"""Kademlia's rules that the mutation pass (`make mutation`, docs/development.md) found untested: RPC
time-outs, PING/PONG, bucket refresh, value expiry and malformed keys (Maymounkov & Mazières 2002,
sections 2.3-2.5, and libp2p's kad-dht spec)."""
from __future__ import annotations

from node.protocols.dht.kademlia_pb2 import Message
from node.protocols.dht.table import content_key, node_key
from tests.unit.test_kademlia import network

T = Message.Type


def test_an_rpc_nobody_answers_times_out_and_the_silent_peer_leaves_the_table():
    """2.3: a contact that fails to respond to an RPC is removed; the caller's on_fail runs once, after
    rpc_timeout and not before."""
    net = network(12, rpc_timeout=2.0)
    a, b = net.nodes["n0"].core.dht, net.nodes["n1"].core.dht
    if "n1" not in a.table:
        a.heard("n1")
    b.on_message = lambda peer, msg: None  # n1 still connected, but answers nothing
    failed, replied = [], []
    start = net.now
    a.request("n1", Message(type=T.PING), replied.append, lambda: failed.append(net.now))
    net.run(until=start + 1.9)
    assert failed == [] and "n1" in a.table
    net.run(until=start + 3)
    assert len(failed) == 1 and 2.0 <= failed[0] - start < 2.1 and replied == []
    assert "n1" not in a.table


def test_a_request_lost_with_its_connection_is_sent_again_and_answered_long_before_rpc_timeout():
    """Two nodes that dial each other at once keep one connection of the two; what was on the other is
    lost. The request is sent again on the link that comes back: answered within a few round trips,
    the peer still in the table, instead of failed after rpc_timeout (the loss that held PulsarCast's
    joins back 5 s per lost RPC under CPU contention)."""
    net = network(12, rpc_timeout=5.0)
    a = net.nodes["n0"].core.dht
    if "n1" not in a.table:
        a.heard("n1")
    failed, replied = [], []
    start = net.now
    a.request("n1", Message(type=T.FIND_NODE, key=b"\x01" * 32), lambda m: replied.append(net.now), failed.append)
    net.run(until=start + 0.005)  # the request is on the wire (latency 10 ms)
    net._close("n0", "n1", "replaced by a newer connection")  # both ends drop it, and what it carried
    net._open("n1", "n0")  # the connection n1 dialled at the same time, up one latency later
    net.run(until=start + 1)
    assert failed == [] and len(replied) == 1 and replied[0] - start < 0.2, (replied, failed)
    assert "n1" in a.table and not a._pending


def test_a_request_to_a_peer_that_went_away_still_fails_once_at_rpc_timeout():
    """No connection comes back, so nothing is sent again: the caller hears one failure, at rpc_timeout,
    and no reply."""
    net = network(12, rpc_timeout=2.0, dial_timeout=1.0)
    a = net.nodes["n0"].core.dht
    if "n1" not in a.table:
        a.heard("n1")
    failed, replied = [], []
    start = net.now
    a.request("n1", Message(type=T.PING), replied.append, lambda: failed.append(net.now))
    net.run(until=start + 0.005)
    net.crash("n1")
    net.run(until=start + 5)
    assert len(failed) == 1 and 2.0 <= failed[0] - start < 2.1 and replied == []
    assert "n1" not in a.table and not a._pending


def test_a_ping_is_answered_with_a_pong_of_the_same_rpc_id():
    net = network(6)
    a = net.nodes["n0"].core.dht
    replies: list[Message] = []
    a.request("n2", Message(type=T.PING), replies.append)
    net.run(until=net.now + 1)
    assert [m.type for m in replies] == [T.PONG] and not a._pending


def test_a_bucket_nobody_looked_into_for_refresh_interval_is_refreshed():
    """2.3: buckets not looked up within an hour (here refresh_interval) are refreshed by a lookup of a
    random id in their range; none before that."""
    net = network(20, refresh_interval=40.0)  # settled at ~31 s; n3's refresh timer ticks at ~40, 80, 120 s
    node = net.nodes["n3"]
    dht = node.core.dht
    lookups = lambda: sum(1 for e in node.events if e["type"] == "dht_lookup")  # noqa: E731
    before = lookups()
    assert before > 0 and net.now < 39  # the bootstrap's own lookups
    net.run(until=39)
    assert lookups() == before
    net.run(until=125)
    assert lookups() > before
    ages = [net.now - dht._touched[i] for i, bucket in enumerate(dht.table.buckets) if bucket]
    assert ages and max(ages) < 45, ages  # every bucket in use was looked into at one of the last ticks


def test_a_value_not_restored_for_value_ttl_is_dropped_and_a_fresh_one_is_republished():
    """2.5: values expire after their TTL unless re-stored; the holder re-publishes the others to the
    k closest every republish_interval."""
    net = network(30, k=4, republish_interval=10.0, value_ttl=30.0)
    holder = net.nodes["n7"].core.dht
    old, fresh = content_key("old"), content_key("fresh")
    holder.values[old] = (b"o", net.now - 31)
    holder.values[fresh] = (b"f", net.now)
    net.run(until=net.now + 11)  # one republish tick
    assert old not in holder.values
    closest = sorted(net.nodes, key=lambda x: node_key(x) ^ fresh)[:4]
    assert all(fresh in net.nodes[x].core.dht.values for x in closest if x != "n7")
    assert not any(old in node.core.dht.values for node in net.nodes.values())


def test_a_request_with_a_malformed_key_is_dropped_and_logged():
    net = network(4)
    a = net.nodes["n0"].core.dht
    msg = Message(type=T.FIND_NODE, rpc_id=7, key=b"\x01\x02")
    start = len(net.nodes["n0"].events)
    a.on_message("n1", msg)
    net.run(until=net.now + 1)
    drops = [e for e in net.nodes["n0"].events[start:] if e["type"] == "drop_rpc"]
    assert [(e["peer"], e["bytes"], e["reason"]) for e in drops] == [("n1", msg.ByteSize(), "bad key")]
    assert not [e for e in net.nodes["n0"].events[start:] if e["type"] == "send_rpc"]


def test_lookup_events_carry_what_the_analysis_reads():
    """dht_lookup (node/events.schema.json): key prefix, RPCs sent, what was found, delay, and whether
    it looked for a node or a value; analysis/extras/dht.py reads each."""
    net = network(40, k=5)
    a = net.nodes["n0"].core.dht
    key = content_key("x")
    net.nodes["n9"].core.dht.put(key, b"v")
    net.run(until=net.now + 5)
    start, t0 = len(net.nodes["n0"].events), net.now
    got: dict[str, object] = {}
    a.find_node(key, lambda found: got.__setitem__("node", (found, net.now)))
    net.run(until=net.now + 5)
    a.get(key, lambda value: got.__setitem__("value", (value, net.now)))
    a.get(content_key("absent"), lambda value: got.__setitem__("absent", value))
    net.run(until=net.now + 5)
    node_ev, value_ev, absent_ev = [e for e in net.nodes["n0"].events[start:] if e["type"] == "dht_lookup"]
    found, at = got["node"]
    assert (node_ev["reason"], node_ev["found"], node_ev["key"]) == ("node", len(found), f"{key:064x}"[:16])
    assert node_ev["delay_ms"] == round((at - t0) * 1000, 3) > 0 and node_ev["msgs"] >= 1
    assert (value_ev["reason"], value_ev["found"], got["value"][0]) == ("value", 1, b"v")
    assert (absent_ev["reason"], absent_ev["found"], got["absent"]) == ("value", 0, None)
    assert a.status()["dht_lookups"] == a.lookups_done >= 3
