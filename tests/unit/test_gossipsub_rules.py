"""GossipSub's rules that the mutation pass (`make mutation`, docs/development.md) found untested: the
events the analysis reads, PRUNE backoff and PX, the heartbeat's mesh arithmetic, broken IWANT
promises, IWANT retransmission, IDONTWANT expiry, unsubscriptions, one-fragment envelopes. Each
test cites the spec rule (libp2p/specs pubsub/gossipsub v1.1/v1.2) or the go behaviour it follows."""
import pytest

from node.protocols.pubsub import pubsub_pb2 as pb
from node.simulated.virtual_network import MemNetwork
from tests.support.pubsub import authored, wire_ids
from tests.unit.test_gossipsub import network


def frame(**control) -> bytes:
    return pb.RPC(control=pb.ControlMessage(**control)).SerializeToString()


def events(net, node, type_, since=0):
    return [e for e in net.nodes[node].events[since:] if e["type"] == type_]


def test_the_events_the_analysis_reads_carry_every_field_with_its_value():
    """publish_message, deliver_message, graft, prune and drop_rpc: every field of the type (node/
    events.schema.json) present, not null, and equal to what happened."""
    net = network(n=12, degree=8, max_rpc_size=50_000)
    net.run(until=3)
    mid = net.nodes["n0"].core.publish("t", b"p" * 1500)
    net.run(until=5)
    (pub,) = events(net, "n0", "publish_message")
    assert (pub["topic"], pub["msg_id"], pub["size"], pub["seq"]) == ("t", mid, 1500, pub["seq"])
    assert isinstance(pub["seq"], int)
    delivered = net.events("deliver_message")
    assert len(delivered) == 11
    for e in delivered:
        assert (e["topic"], e["msg_id"], e["origin"], e["size"]) == ("t", mid, "n0", 1500)
        assert e["peer"] in net.nodes[e["node"]].core.peer_topics
    grafts = net.events("graft")
    assert grafts and all(e["topic"] == "t" and e["peer"] in net.nodes[e["node"]].core.peer_topics for e in grafts)
    core = net.nodes["n1"].core
    peer = sorted(core.mesh["t"])[0]
    core.on_frame(peer, frame(prune=[pb.ControlPrune(topicID="t")]))
    assert events(net, "n1", "prune")[-1] | {"ts": 0} == {"ts": 0, "node": "n1", "type": "prune", "peer": peer,
                                                          "topic": "t"}
    big, junk = pb.RPC(publish=[authored(net, "n2", 9, "t", b"x" * 60_000)]).SerializeToString(), b"\xff\xff\xff"
    core.on_frame("n2", big)
    core.on_frame("n2", junk)
    drops = [(e["peer"], e["bytes"], e["reason"]) for e in events(net, "n1", "drop_rpc")]
    assert drops == [("n2", len(big), "oversized"), ("n2", len(junk), "malformed")]


def test_an_rpc_of_exactly_the_size_limit_is_accepted():
    """go: RPCs larger than the limit are dropped; one at the limit is not."""
    payload = pb.RPC(publish=[authored(MemNetwork(seed=1), "n1", 1, "t", b"a" * 500)]).SerializeToString()
    net = network(n=2, degree=2, seed=1, max_rpc_size=len(payload))
    net.run(until=2)
    net.nodes["n0"].core.on_frame("n1", payload)
    assert not events(net, "n0", "drop_rpc") and events(net, "n0", "deliver_message")


def test_a_prune_backs_off_for_its_own_backoff_or_the_default_and_px_peers_are_dialled():
    """v1.1 PRUNE: the pruned peer is not grafted again before the backoff ends (the PRUNE's own, else
    prune_backoff); with scoring off, the peers offered in PX are connected."""
    net = network(n=14, degree=12, D=6, D_lo=5, D_hi=12)
    net.run(until=3)
    core = net.nodes["n0"].core
    a, b = sorted(core.mesh["t"])[:2]
    core.on_frame(a, frame(prune=[pb.ControlPrune(topicID="t", backoff=30)]))
    core.on_frame(b, frame(prune=[pb.ControlPrune(topicID="t")]))
    now = net.now
    assert core.backoff[("t", a)] == pytest.approx(now + 30) and core.backoff[("t", b)] == pytest.approx(now + 60)
    for _ in range(20):  # twenty heartbeats with the mesh emptied each time: a and b stay out
        core.mesh["t"].clear()
        core.heartbeat()
        assert a not in core.mesh["t"] and b not in core.mesh["t"] and len(core.mesh["t"]) == 6
    net.run(until=now + 31)
    core.mesh["t"] = set()
    for _ in range(40):
        core.mesh["t"].clear()
        core.heartbeat()
        if a in core.mesh["t"]:
            break
    assert a in core.mesh["t"] and ("t", b) in core.backoff  # a's 30 s are over, b's 60 s are not
    net.add_node("n99", type(core), core.params)
    core.on_frame(a, frame(prune=[pb.ControlPrune(topicID="t", peers=[pb.PeerInfo(peerID=net.identities.peer_id("n99"))])]))
    net.run(until=net.now + 1)
    assert "n99" in core.peer_topics


def test_heartbeat_grafts_exactly_up_to_D_and_prunes_to_D_keeping_D_out_outbound_peers():
    """v1.1 heartbeat: below D_lo, graft D - |mesh| peers; above D_hi, keep D, of which at least D_out
    outbound (go: the outbound quota survives every prune)."""
    net = network(n=20, degree=18, D=6, D_lo=4, D_hi=8, D_out=2, D_score=2)
    net.run(until=3)
    core = net.nodes["n0"].core
    peers = sorted(core.peer_topics)
    assert len(peers) >= 14
    for keep in range(4):  # |mesh| below D_lo: topped up to D exactly
        core.mesh["t"] = set(peers[:keep])
        core.backoff.clear()
        core.heartbeat()
        assert len(core.mesh["t"]) == 6, keep
    core.outbound = set(peers[-2:])
    for _ in range(30):  # above D_hi: back to D, both outbound peers kept, whatever the shuffle
        core.mesh["t"] = set(peers)
        core.backoff.clear()
        core.heartbeat()
        assert len(core.mesh["t"]) == 6 and set(peers[-2:]) <= core.mesh["t"]


def test_a_broken_iwant_promise_costs_the_advertiser_one_penalty_per_iwant_and_a_kept_one_nothing():
    """v1.1: a peer that advertises ids in IHAVE and does not deliver them within iwant_followup_time
    after our IWANT gets a behaviour penalty (P7) at the next heartbeat. go's gossip tracer (AddPromise)
    tracks one id of each IWANT, chosen at random, so an IWANT broken in full costs one penalty."""
    net = network(n=3, degree=4)
    net.run(until=3)
    core = net.nodes["n0"].core
    kept = authored(net, "n2", 5, "t", b"k" * 100)
    core.on_frame("n1", frame(ihave=[pb.ControlIHave(topicID="t", messageIDs=wire_ids(net, "n1-900", "n1-901"))]))
    core.on_frame("n2", frame(ihave=[pb.ControlIHave(topicID="t", messageIDs=wire_ids(net, "n2-5"))]))
    assert len(set(core.promises) & {"n1-900", "n1-901"}) == 1 and core.promises["n2-5"].keys() == {"n2"}
    core.on_frame("n2", pb.RPC(publish=[kept]).SerializeToString())
    assert "n2-5" not in core.promises
    before = core.score.penalty("n1"), core.score.penalty("n2")
    core.heartbeat()  # within the follow-up time: nothing yet
    assert (core.score.penalty("n1"), core.score.penalty("n2")) == before
    net.run(until=net.now + core.params.iwant_followup_time + 0.5)
    core.heartbeat()
    # one for the IWANT (and decayed once by the same heartbeat's refresh)
    assert core.score.penalty("n1") == pytest.approx(1, rel=0.02) and core.score.penalty("n2") == before[1] == 0
    assert not core.promises


def test_an_iwant_is_answered_at_most_gossip_retransmission_times_per_peer():
    """go: a message is sent to one peer in answer to IWANT at most GossipRetransmission times."""
    net = network(n=3, degree=4, gossip_retransmission=2)
    net.run(until=3)
    core = net.nodes["n0"].core
    mid = core.publish("t", b"r" * 100)
    start = len(net.nodes["n0"].events)
    for _ in range(5):
        core.on_frame("n1", frame(iwant=[pb.ControlIWant(messageIDs=wire_ids(net, mid))]))
    served = [e for e in events(net, "n0", "send_rpc", start) if e["peer"] == "n1" and e.get("msgs")]
    assert len(served) == 2


def test_an_idontwant_is_kept_for_idontwant_ttl_heartbeats_then_forgotten():
    """v1.2: a received IDONTWANT is honoured for idontwant_ttl heartbeats (go: 3), no longer."""
    net = network(n=3, degree=4, idontwant_ttl=3)
    net.run(until=3)
    core = net.nodes["n0"].core
    core.on_frame("n1", frame(idontwant=[pb.ControlIDontWant(messageIDs=wire_ids(net, "n2-40"))]))
    for _ in range(2):
        core.heartbeat()
        assert "n2-40" in core.dontwant["n1"]
    core.heartbeat()
    assert "n2-40" not in core.dontwant["n1"]
    mid = core.publish("t", b"s" * 3000)
    core.on_frame("n1", frame(idontwant=[pb.ControlIDontWant(messageIDs=wire_ids(net, mid))]))
    start = len(net.nodes["n0"].events)
    core.on_frame("n1", frame(iwant=[pb.ControlIWant(messageIDs=wire_ids(net, mid))]))
    (skip,) = events(net, "n0", "idontwant_skip", start)
    assert (skip["peer"], skip["msg_id"], skip["size"]) == ("n1", mid, 3000)


def test_an_unsubscribed_peer_leaves_the_topic_and_the_mesh():
    """pubsub: SUBOPTS subscribe=false removes the peer from the topic's peers and, in gossipsub, from
    the mesh."""
    net = network(n=6, degree=5, D=4, D_lo=3, D_hi=5)
    net.run(until=3)
    core = net.nodes["n0"].core
    peer = sorted(core.mesh["t"])[0]
    core.on_frame(peer, pb.RPC(subscriptions=[pb.RPC.SubOpts(subscribe=False, topicid="t")]).SerializeToString())
    assert "t" not in core.peer_topics[peer] and peer not in core.mesh["t"]
    assert peer not in core._topic_peers("t")


def test_with_fragmentation_on_a_small_message_travels_whole_in_one_envelope():
    """The fragmentation variant: below fragment_threshold a message is one fragment whose digest the
    receivers check; every subscriber gets the bytes published, under the envelope's id."""
    net = network(n=8, degree=6, fragments=4, fragment_threshold=1024)
    net.run(until=3)
    whole = net.nodes["n0"].core.publish("t", b"small message")
    net.run(until=6)
    got = {d.msg_id: d.data for node in net.nodes.values() for d in node.delivered}
    assert got == {whole: b"small message"}
    assert sum(len(node.delivered) for node in net.nodes.values()) == 7
    assert not net.events("reject_message")


def test_opportunistic_grafting_adds_better_peers_when_the_mesh_median_is_low():
    """v1.1 opportunistic grafting: every opportunistic_graft_ticks heartbeats, if the median score of
    the mesh is below the threshold, graft up to opportunistic_graft_peers peers scoring above it."""
    net = network(n=14, degree=12, D=4, D_lo=3, D_hi=8, D_out=1, opportunistic_graft_ticks=3,
                  opportunistic_graft_peers=2, scoring={"enabled": True, "opportunistic_graft_threshold": 1.0})
    net.run(until=3)
    core = net.nodes["n0"].core
    peers = sorted(core.peer_topics)
    good = peers[-3:]
    scores = {x: (5.0 if x in good else 0.0) for x in peers}
    core.score.score = scores.__getitem__
    core.mesh["t"] = set(peers[:4])
    core.outbound = set(peers[:4])
    while (core.tick + 1) % 3:
        core.heartbeat()
        assert core.mesh["t"] == set(peers[:4])  # only on every third heartbeat
    core.heartbeat()
    assert len(core.mesh["t"] & set(good)) == 2 and set(peers[:4]) <= core.mesh["t"]
    scores.update({x: 2.0 for x in peers[:4]})  # median above the threshold: nothing more
    core.mesh["t"] = set(peers[:4])
    for _ in range(3):
        core.heartbeat()
    assert core.mesh["t"] == set(peers[:4])


def test_outbound_quota_is_topped_up_when_the_mesh_has_enough_peers_but_too_few_outbound():
    """v1.1: with |mesh| >= D_lo but fewer than D_out outbound peers, graft outbound peers up to D_out."""
    net = network(n=14, degree=12, D=6, D_lo=4, D_hi=10, D_out=3)
    net.run(until=3)
    core = net.nodes["n0"].core
    peers = sorted(core.peer_topics)
    core.outbound = set(peers[-4:])
    core.mesh["t"] = set(peers[:5]) | {peers[-1]}
    core.backoff.clear()
    core.heartbeat()
    assert len(core.mesh["t"] & core.outbound) == 3 and set(peers[:5]) <= core.mesh["t"]


def test_a_fanout_expires_fanout_ttl_after_the_last_publish():
    """pubsub/gossipsub v1.0: fanout peers of a topic we publish to without joining are forgotten
    fanout_ttl after our last publish."""
    net = network(n=10, degree=8, flood_publish=False, fanout_ttl=5.0)
    net.run(until=3)
    core = net.nodes["n0"].core
    core.unsubscribe("t")
    core.publish("t", b"f" * 10)
    assert len(core.fanout["t"]) == core.params.D
    net.run(until=net.now + 4.5)
    assert "t" in core.fanout
    net.run(until=net.now + 2)
    assert "t" not in core.fanout and "t" not in core.fanout_last_pub


def test_a_message_leaves_the_cache_after_history_length_heartbeats_and_is_no_longer_served():
    """gossipsub: the message cache keeps history_length windows; an IWANT for an older id gets nothing."""
    net = network(n=3, degree=4, history_length=3, history_gossip=2)
    net.run(until=3)
    core = net.nodes["n0"].core
    mid = core.publish("t", b"h" * 100)
    for _ in range(2):
        core.heartbeat()
    assert mid in core.mcache
    core.heartbeat()
    assert mid not in core.mcache and mid not in core.mcache_topic
    start = len(net.nodes["n0"].events)
    core.on_frame("n1", frame(iwant=[pb.ControlIWant(messageIDs=wire_ids(net, mid))]))
    assert not [e for e in events(net, "n0", "send_rpc", start) if e.get("msgs")]
