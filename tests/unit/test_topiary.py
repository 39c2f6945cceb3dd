"""Topiary's core: the epoch arithmetic on crafted tables, and the learning loop on the in-memory
network (deterministic: one seed, virtual time)."""
import collections
import math
import random
import statistics

import pytest

from node.protocols import get_protocol
from node.protocols.topiary import score as ts
from node.protocols.topiary.core import Topiary, TopiaryParams
from node.simulated.virtual_network import MemNetwork

W = ts.Weights(coverage=1.0, delay=10.0, waste=0.0)


def obs(topic, first, **arrivals):
    return ts.Observation(topic, first, dict(arrivals))


# eqs. 1-5 ----------------------------------------------------------------------------------------

def test_relative_times_are_measured_from_the_first_copy():
    o = obs("a", 1.0, p=1.0, q=1.25)
    assert o.relative("p") == 0.0 and o.relative("q") == 0.25 and o.relative("r") == math.inf
    assert o.best(["q", "r"]) == 0.25 and o.best(["r"]) == math.inf


def test_subset_scoring_picks_the_fastest_subset_on_a_crafted_table():
    # neighbours: f1, f2 always first/second; s1, s2 slow; m misses half the messages
    table = []
    for k in range(10):
        t = float(k)
        arrivals = {"f1": t, "f2": t + 0.01, "s1": t + 0.2, "s2": t + 0.3}
        if k % 2 == 0:
            arrivals["m"] = t + 0.005
        table.append(ts.Observation("a", t, arrivals))
    kept, best = ts.best_subset(["f1", "f2", "s1", "s2", "m"], 2, table, {"a"}, {"a": 10}, W)
    assert kept == ("f1", "f2")
    assert best.coverage == 0.0 and best.delay == pytest.approx(0.0)
    # a subset that misses messages pays the coverage term: {m, s2} relays 100%, {m} alone half
    only_m = ts.score(["m"], table, {"a"}, {"a": 10}, W)
    assert only_m.coverage == pytest.approx(0.5)
    assert ts.score(["s1", "s2"], table, {"a"}, {"a": 10}, W).delay == pytest.approx(0.2)


def test_coverage_is_measured_against_expected_messages_not_only_received_ones():
    table = [obs("a", 0.0, p=0.0)]
    # 4 messages were expected (gaps seen), the subset relayed 1
    assert ts.score(["p"], table, {"a"}, {"a": 4}, W).coverage == pytest.approx(0.75)


def test_uninterested_messages_count_as_waste_only():
    table = [obs("a", 0.0, p=0.0), obs("x", 0.0, p=0.0, q=0.1)]
    s = ts.score(["p"], table, {"a"}, {"a": 1}, ts.Weights(1, 10, 0.5))
    assert s.waste == 1 and s.total == pytest.approx(0.5)


# eqs. 6-10 ---------------------------------------------------------------------------------------

def test_underperforming_topics_are_those_above_eta_times_the_best():
    scores = {"a": 0.1, "b": 0.14, "c": 0.5}
    assert ts.underperforming(scores, 1.5) == {"c"}
    assert ts.underperforming(scores, 1.2) == {"b", "c"}


def test_topic_scores_use_only_that_topics_messages():
    table = [obs("a", 0.0, p=0.0), obs("b", 1.0, q=1.0, p=1.3)]
    per = ts.topic_scores(["p"], table, {"a", "b"}, {"a": 1, "b": 2}, W)
    assert per["a"] == pytest.approx(0.0)
    assert per["b"] == pytest.approx(1.0 * 0.5 + 10.0 * 0.3)  # missed 1 of 2, relayed one 0.3 s late


def test_exploration_samples_in_proportion_to_omega():
    directory = {"u1": frozenset({"a"}), "u2": frozenset({"a", "b"}), "u3": frozenset({"a", "b", "c"}),
                 "u4": frozenset({"z"}), "kept": frozenset({"a", "b", "c"})}
    weights = ts.exploration_weights({"a", "b", "c"}, directory, exclude={"kept"})
    assert weights == {"u1": 1, "u2": 2, "u3": 3, "u4": 0}
    rng = random.Random(7)
    counts = collections.Counter(ts.weighted_sample(weights, 1, rng)[0] for _ in range(12000))
    assert counts["u4"] == 0
    for u, w in (("u1", 1), ("u2", 2), ("u3", 3)):
        assert counts[u] / 12000 == pytest.approx(w / 6, abs=0.015)
    # without replacement: k draws are distinct and zero weights never fill a slot
    assert sorted(ts.weighted_sample(weights, 5, rng)) == ["u1", "u2", "u3"]


# the core on the in-memory network -------------------------------------------------------------

def square_world(n, seed, scale=0.1):
    rng = random.Random(seed)
    points = [(rng.random(), rng.random()) for _ in range(n)]
    return lambda a, b: 0.002 + scale * math.dist(points[int(a[1:])], points[int(b[1:])])


def build(protocol, n=40, d=4, topics=10, rate=0.3, seed=3, behaviours=None, **params):
    """n nodes in a unit square, each dialling d random others; subscriptions at `rate` per topic."""
    rng = random.Random(seed)
    net = MemNetwork(seed, square_world(n, seed))
    cls = get_protocol(protocol)
    p = cls.Params(**({"degree": d, "epoch": 5.0, **params} if cls is Topiary else params))
    subs = [{f"t{t}" for t in range(topics) if rng.random() < rate} or {"t0"} for _ in range(n)]
    for i in range(n):
        net.add_node(f"n{i}", cls, p, behaviour=(behaviours or {}).get(i))
        for t in sorted(subs[i]):
            net.nodes[f"n{i}"].core.subscribe(t)
    for i in range(n):
        for j in rng.sample([j for j in range(n) if j != i], d):
            net.connect(f"n{i}", f"n{j}")
    net.run(until=1.0)
    return net, subs, rng


def publish_for(net, subs, rng, seconds, per_second=10, start=1.0, honest=None):
    members = collections.defaultdict(list)
    for i, s in enumerate(subs):
        if honest is None or i in honest:
            for t in s:
                members[t].append(i)
    out, t = [], start
    while t < start + seconds:
        topic = f"t{rng.randrange(len(set().union(*subs)))}"
        if members[topic]:
            net.run(until=t)
            p = rng.choice(members[topic])
            out.append((t, topic, net.nodes[f"n{p}"].core.publish(topic, b"m"), p))
        t += 1 / per_second
    net.run(until=t + 2)
    return out


def measure(net, subs, pubs, since, honest=None):
    """(interested coverage, mean delay in ms) of messages published after `since`."""
    got = {(d.msg_id, n): d.time for n, node in net.nodes.items() for d in node.delivered}
    cover, delays = [], []
    for t, topic, msg_id, p in pubs:
        if t < since:
            continue
        want = [f"n{i}" for i, s in enumerate(subs) if topic in s and i != p and (honest is None or i in honest)]
        if want:
            recv = [got[(msg_id, n)] - t for n in want if (msg_id, n) in got]
            cover.append(len(recv) / len(want))
            delays += recv
    return statistics.fmean(cover), 1000 * statistics.fmean(delays)


@pytest.mark.slow
def test_topiary_learns_a_faster_topology_than_the_random_one_it_starts_from():
    net, subs, rng = build("topiary")
    pubs = publish_for(net, subs, rng, 100)
    first_cov, first_delay = measure(net, subs, [p for p in pubs if p[0] < 6], 0)
    cov, delay = measure(net, subs, pubs, 81)
    net_r, subs_r, rng_r = build("random-overlay")
    pubs_r = publish_for(net_r, subs_r, rng_r, 100)
    random_cov, random_delay = measure(net_r, subs_r, pubs_r, 81)
    assert first_delay == pytest.approx(random_delay, rel=0.15)  # the same start
    assert delay < 0.8 * random_delay, (delay, random_delay)
    assert cov >= 0.98 and cov >= random_cov - 0.01
    epochs = net.events("topiary_epoch")
    assert {e["node"] for e in epochs} == set(net.nodes)
    # the degree bound holds: never more than d outgoing picks
    assert all(len(n.core.chosen) <= 4 for n in net.nodes.values())


def test_epochs_keep_round_0_6_d_and_refill_to_d():
    net, subs, rng = build("topiary", n=20, d=5, topics=4, rate=0.5)
    publish_for(net, subs, rng, 12)
    for e in net.events("topiary_epoch"):
        kept = [p for p in e["kept"].split(",") if p]
        explored = [p for p in e["explored"].split(",") if p]
        assert len(kept) == 3  # round(0.6 x 5)
        assert len(kept) + len(explored) == 5
        assert not set(kept) & set(explored)


def test_epoch_by_message_count():
    net, subs, rng = build("topiary", n=12, d=3, topics=2, rate=0.8, epoch=None, epoch_messages=10)
    publish_for(net, subs, rng, 6)
    per_node = collections.Counter(e["node"] for e in net.events("topiary_epoch"))
    assert per_node and max(per_node.values()) >= 3


def test_gaps_in_topic_sequence_numbers_raise_the_expected_count():
    net = MemNetwork(seed=1, latency=0.01)
    a = net.add_node("a", Topiary, TopiaryParams(degree=2))
    b = net.add_node("b", Topiary, TopiaryParams(degree=2))
    for node in (a, b):
        node.core.subscribe("t")
    net.connect("a", "b")
    net.run(until=1)
    a.core.publish("t", b"1")
    a.core.topic_seq["t"] += 2          # two messages b never hears of
    a.core.publish("t", b"2")
    net.run(until=2)
    assert b.core.expected() == {"t": 4.0}


def test_a_topic_drop_attacker_never_forwards_the_victim_topic():
    net = MemNetwork(seed=1, latency=0.01)
    for name in ("src", "bad", "dst"):
        net.add_node(name, get_protocol("static-overlay"), behaviour={"behaviour": "topic-drop", "topic": "v"}
                     if name == "bad" else None)
        for t in ("v", "w"):
            net.nodes[name].core.subscribe(t)
    net.connect("src", "bad")
    net.connect("bad", "dst")
    net.run(until=1)
    net.nodes["src"].core.publish("v", b"x")
    net.nodes["src"].core.publish("w", b"y")
    net.run(until=2)
    assert [d.topic for d in net.nodes["dst"].delivered] == ["w"]
    assert [d.topic for d in net.nodes["bad"].delivered] == ["v", "w"]  # it did receive both
    assert [e["reason"] for e in net.events("drop_rpc")] == ["attack: topic-drop"]


@pytest.mark.parametrize("behaviour,delivered_at", [("censor", None), ("slow", 0.3 + 0.02)])
def test_censor_forwards_nothing_and_slow_forwards_late(behaviour, delivered_at):
    net = MemNetwork(seed=1, latency=0.01)
    for name in ("src", "bad", "dst"):
        net.add_node(name, get_protocol("static-overlay"),
                     behaviour={"behaviour": behaviour, "delay": 0.3} if name == "bad" else None)
        net.nodes[name].core.subscribe("t")
    net.connect("src", "bad")
    net.connect("bad", "dst")
    net.run(until=1)
    net.nodes["src"].core.publish("t", b"x")
    net.run(until=3)
    got = [d.time - 1 for d in net.nodes["dst"].delivered]
    assert got == ([] if delivered_at is None else [pytest.approx(delivered_at)])


def test_eclipse_attackers_keep_their_colluders_whatever_the_core_decides():
    net = MemNetwork(seed=1, latency=0.01)
    net.add_node("e1", Topiary, TopiaryParams(degree=1), behaviour={"behaviour": "eclipse", "colluders": ["e2"]})
    net.add_node("e2", Topiary, TopiaryParams(degree=1))
    net.add_node("h", Topiary, TopiaryParams(degree=1))
    net.connect("e1", "e2")
    net.connect("e1", "h")
    net.run(until=1)
    net.nodes["e1"].core.io.disconnect("e2")
    net.nodes["e1"].core.io.disconnect("h")
    assert frozenset(("e1", "e2")) in net.links and frozenset(("e1", "h")) not in net.links


@pytest.mark.slow
def test_topiary_routes_around_topic_drop_attackers_where_a_random_overlay_does_not():
    n, victim_topic = 40, "t1"
    attackers = set(random.Random(5).sample(range(n), 12))  # 30%
    behaviours = {i: {"behaviour": "topic-drop", "topic": victim_topic} for i in attackers}
    honest = set(range(n)) - attackers
    late = {}
    for protocol in ("topiary", "random-overlay"):
        net, subs, rng = build(protocol, n=n, d=3, behaviours=behaviours, topics=6, rate=0.2)
        for i in attackers:
            net.nodes[f"n{i}"].core.subscribe(victim_topic)
            subs[i] = subs[i] | {victim_topic}
        pubs = publish_for(net, subs, rng, 120, honest=honest)
        victim = [p for p in pubs if p[1] == victim_topic]
        late[protocol], _ = measure(net, subs, victim, 81, honest)  # epochs 16-24
    assert late["topiary"] >= 0.95 > late["random-overlay"], late
