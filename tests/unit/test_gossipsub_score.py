"""GossipSub peer scoring (P1..P7, decay, thresholds), validators and the drain-time stagger option:
the counters on their own, then the router on the in-memory network."""
import pytest
from pydantic import ValidationError
from test_gossipsub import network

from node.protocols.gossipsub.core import GossipSubParams
from node.protocols.gossipsub.score import PeerScore, ScoreParams
from node.protocols.pubsub.pubsub_pb2 import RPC, ControlGraft, ControlMessage
from node.protocols.pubsub.validators import ValidationParams
from tests.support.pubsub import authored, wire_ids


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def scorer(**params):
    clock = Clock()
    return PeerScore(ScoreParams(enabled=True, **params), clock), clock


def test_scoring_off_means_every_score_is_zero():
    ps = PeerScore(ScoreParams(), Clock())
    ps.add_peer("a", "1.1.1.1")
    ps.first_seen("m", "a")
    ps.validated("m", "t", False)
    ps.add_penalty("a", 5)
    assert ps.score("a") == 0.0
    assert ps.penalty("a") == 5  # the input is still counted


def test_p1_time_in_mesh_and_p2_first_deliveries_with_decay():
    ps, clock = scorer(default_topic={"time_in_mesh_weight": 1.0, "first_message_deliveries_weight": 2.0,
                                      "first_message_deliveries_decay": 0.5, "mesh_message_deliveries_weight": 0.0})
    ps.add_peer("a", None)
    ps.graft("a", "t")
    clock.now = 3.0
    ps.refresh(seen_ttl=120)
    assert ps.score("a") == pytest.approx(3.0)  # 3 s in the mesh, quantum 1 s
    for i in range(4):
        ps.first_seen(f"m{i}", "a")
        ps.validated(f"m{i}", "t", True)
    assert ps.score("a") == pytest.approx(3.0 + 2 * 4)
    clock.now = 4.0
    ps.refresh(seen_ttl=120)  # one decay interval: P2 halves
    assert ps.score("a") == pytest.approx(4.0 + 2 * 2)


def test_p3_deficit_after_activation_and_p3b_sticks_after_prune():
    ps, clock = scorer(default_topic={"time_in_mesh_weight": 0.0, "first_message_deliveries_weight": 0.0,
                                      "mesh_message_deliveries_threshold": 4, "mesh_message_deliveries_activation": 2,
                                      "mesh_message_deliveries_weight": -1.0, "mesh_failure_penalty_weight": -2.0,
                                      "mesh_failure_penalty_decay": 0.5})
    ps.add_peer("a", None)
    ps.graft("a", "t")
    clock.now = 1.0
    assert ps.score("a") == 0.0  # not active yet
    ps.first_seen("m1", "a")
    ps.validated("m1", "t", True)
    clock.now = 2.5
    assert ps.score("a") == pytest.approx(-(4 - 1) ** 2)
    ps.prune("a", "t")
    assert ps.score("a") == pytest.approx(-2 * 9)  # P3b keeps the deficit after the prune


def test_near_first_copy_from_a_mesh_peer_counts_for_p3_late_copy_does_not():
    ps, clock = scorer(default_topic={"mesh_message_deliveries_window": 0.05})
    for peer in ("a", "b", "c"):
        ps.add_peer(peer, None)
        ps.graft(peer, "t")
    ps.first_seen("m", "a")
    ps.validated("m", "t", True)
    clock.now = 0.01
    ps.duplicate("m", "t", "b")
    clock.now = 0.2
    ps.duplicate("m", "t", "c")
    mesh = {p: ps.peers[p].topics["t"].mesh_deliveries for p in "abc"}
    assert mesh == {"a": 1, "b": 1, "c": 0}


def test_p4_invalid_messages_blame_every_sender_and_square():
    ps, clock = scorer(default_topic={"invalid_message_deliveries_weight": -1.0, "time_in_mesh_weight": 0.0})
    ps.add_peer("a", None)
    ps.add_peer("b", None)
    for i in range(3):
        ps.first_seen(f"m{i}", "a")
        ps.duplicate(f"m{i}", "t", "b")
        ps.validated(f"m{i}", "t", False)
    assert ps.score("a") == pytest.approx(-9)
    assert ps.score("b") == pytest.approx(-9)
    ps.first_seen("ok", "a")
    ps.validated("ok", "t", None)  # ignore: no blame, no credit
    assert ps.score("a") == pytest.approx(-9)


def test_p6_ip_colocation_and_p7_behaviour_penalty():
    ps, clock = scorer(ip_colocation_factor_threshold=1, ip_colocation_factor_weight=-1.0,
                       behaviour_penalty_threshold=1.0, behaviour_penalty_weight=-1.0)
    for peer in ("a", "b", "c"):
        ps.add_peer(peer, "10.0.0.9")
    ps.add_peer("d", "10.0.0.10")
    assert ps.score("a") == pytest.approx(-(3 - 1) ** 2)
    assert ps.score("d") == 0.0
    ps.add_penalty("d", 4)
    assert ps.score("d") == pytest.approx(-(4 - 1) ** 2)


def test_negative_state_is_retained_across_a_reconnect_until_retain_score():
    ps, clock = scorer(retain_score=10, default_topic={"invalid_message_deliveries_weight": -1.0,
                                                       "invalid_message_deliveries_decay": 0.99})
    ps.add_peer("a", None)
    ps.first_seen("m", "a")
    ps.validated("m", "t", False)
    ps.remove_peer("a")
    ps.add_peer("a", None)
    assert ps.score("a") < 0  # reconnecting does not wash the score
    ps.remove_peer("a")
    clock.now = 11
    ps.refresh(seen_ttl=120)
    ps.add_peer("a", None)
    assert ps.score("a") == 0.0


def test_thresholds_must_be_ordered():
    with pytest.raises(ValidationError, match="graylist < publish <= gossip"):
        ScoreParams(gossip_threshold=-100, publish_threshold=-50, graylist_threshold=-80)


# the router --------------------------------------------------------------------------------------

SCORING = {"enabled": True, "default_topic": {"invalid_message_deliveries_weight": -20.0,
                                              "mesh_message_deliveries_weight": 0.0}}


def test_rejected_messages_are_not_delivered_or_relayed_and_the_sender_is_pruned_then_graylisted():
    net = network(n=12, degree=8, scoring=SCORING,
                  validation={"rule": "reject-origins", "origins": ["n5"]})
    net.run(until=4)
    bad = net.nodes["n5"].core
    ids = [bad.publish("t", b"x" * 200) for _ in range(3)]
    net.run(until=net.now + 0.5)
    assert not [e for e in net.events("deliver_message") if e["msg_id"] in ids]
    rejects = [e for e in net.events("reject_message") if e["reason"] == "validation: reject"]
    assert rejects and {e["peer"] for e in rejects} == {"n5"}  # never relayed: only n5 sent them
    net.run(until=net.now + 1.5)  # a heartbeat: negative peers leave the mesh
    neighbours = [node for node in net.nodes.values() if "n5" in node.core.peer_topics]
    for node in neighbours:
        assert node.core.score.score("n5") < -80  # P4: 3 invalid, squared, x 20, slowly decayed
        assert "n5" not in node.core.mesh["t"]
    # graylisted: its next RPC is dropped unread
    before = {node.node_id: len(node.events) for node in neighbours}
    good_id = bad.publish("t", b"y" * 200)
    net.run(until=net.now + 0.5)
    for node in neighbours:
        new = node.events[before[node.node_id]:]
        assert not [e for e in new if e["type"] == "deliver_message" and e["msg_id"] == good_id]
    # honest publishers are unaffected
    ok = net.nodes["n0"].core.publish("t", b"z" * 200)
    net.run(until=net.now + 1)
    assert {e["node"] for e in net.events("deliver_message") if e["msg_id"] == ok} == {f"n{i}" for i in range(1, 12)} - {"n5"}


def test_ignored_messages_are_dropped_without_blame():
    net = network(n=6, degree=4, scoring=SCORING, validation={"rule": "ignore-origins", "origins": ["n2"]})
    net.run(until=4)
    msg_id = net.nodes["n2"].core.publish("t", b"x" * 100)
    net.run(until=net.now + 1)
    assert not [e for e in net.events("deliver_message") if e["msg_id"] == msg_id]
    ignored_by = {e["node"] for e in net.events("reject_message") if e["reason"] == "validation: ignore"}
    assert ignored_by - {"n2"}, "no peer of n2 received its message and ignored it"
    for node_id in ignored_by - {"n2"}:
        assert node_id in net.nodes["n2"].core.peer_topics  # a peer of n2's, which scores it
        assert net.nodes[node_id].core.score.score("n2") >= 0, node_id


def test_validation_delay_holds_delivery_and_relay():
    fast = network(n=8, degree=4, latency=0.01)
    slow = network(n=8, degree=4, latency=0.01, validation={"delay": 0.2})
    times = {}
    for name, net in (("fast", fast), ("slow", slow)):
        net.run(until=4)
        start = net.now
        msg_id = net.nodes["n0"].core.publish("t", b"v" * 100)
        net.run(until=start + 3)
        times[name] = max(e["ts"] for e in net.events("deliver_message") if e["msg_id"] == msg_id) / 1e9 - start
    assert times["slow"] >= times["fast"] + 0.2  # at least one validation on every path


def test_graft_from_a_negative_peer_is_refused():
    net = network(n=3, degree=4, scoring=SCORING)
    net.run(until=3)
    core = net.nodes["n0"].core
    core.mesh["t"].discard("n1")
    core.score.peers["n1"].penalty = 5  # P7 = -25: negative, above the graylist threshold
    before = len(net.nodes["n0"].events)
    core.on_frame("n1", RPC(control=ControlMessage(graft=[ControlGraft(topicID="t")])).SerializeToString())
    assert "n1" not in core.mesh["t"]
    assert any(e["type"] == "send_rpc" and e["peer"] == "n1" and e.get("prune") for e in net.nodes["n0"].events[before:])


def test_oversubscribed_mesh_keeps_the_best_scored_peers():
    net = network(n=14, degree=13, scoring={"enabled": True}, D=4, D_lo=3, D_hi=5, D_score=2, D_out=0)
    net.run(until=3)
    core = net.nodes["n0"].core
    best = sorted(core.peer_topics)[-2:]
    core.params.scoring.app_specific_scores.update({best[0]: 100.0, best[1]: 90.0})  # P5
    core.mesh["t"] |= set(core.peer_topics)  # far above D_hi
    assert len(core.mesh["t"]) > 5
    core.heartbeat()
    assert len(core.mesh["t"]) == 4 and set(best) <= core.mesh["t"]


def test_idontwant_skips_are_logged_as_saves():
    net = network(n=3, degree=4, idontwant=True)
    net.run(until=3)
    relay = net.nodes["n1"].core
    from node.protocols.pubsub.pubsub_pb2 import ControlIDontWant
    relay.on_frame("n2", RPC(control=ControlMessage(idontwant=[ControlIDontWant(messageIDs=wire_ids(net, "n0-77"))])).SerializeToString())
    relay.on_frame("n0", RPC(publish=[authored(net, "n0", 77, "t", b"z" * 5000)]).SerializeToString())
    saves = [e for e in net.nodes["n1"].events if e["type"] == "idontwant_skip"]
    assert [(e["peer"], e["size"]) for e in saves] == [("n2", 5000)]


def test_drain_time_stagger_moves_on_after_the_estimated_drain_not_the_interval():
    # memory has no backlog, so the estimate is the message's own time at stagger_rate: 50 KB at
    # 8 Mbit/s = 50 ms, well under the 1 s fixed interval
    base = dict(n=8, degree=7, D=6, D_lo=4, D_hi=8, latency=0.3, variant="stagger-seq", idontwant=False,
                stagger_interval=1.0)
    sends = {}
    for mode in ("fixed", "drain"):
        net = network(stagger_timeout=mode, stagger_rate=8e6, **base)
        net.run(until=4)
        start = len(net.nodes["n0"].events)
        t0 = net.now
        net.nodes["n0"].core.publish("t", b"d" * 50_000)
        net.run(until=t0 + 0.2)
        sends[mode] = len([e for e in net.nodes["n0"].events[start:] if e["type"] == "send_rpc" and e.get("msgs")])
    assert sends["fixed"] == 1
    assert sends["drain"] >= 3  # moved on every ~50 ms


def test_validation_params_name_what_is_missing():
    with pytest.raises(ValidationError, match="needs validation.origins"):
        ValidationParams(rule="reject-origins")
    with pytest.raises(ValidationError, match="needs validation.max_size"):
        GossipSubParams(validation={"rule": "max-size"})
