"""The planner: deterministic, and faithful to the scenario's numbers."""
import pytest

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario

SC = """
name: p
seed: 3
nodes: {count: 40, groups: [{name: fast, count: 5, bandwidth_up: 1gbit}]}
topology: {algorithm: random, degree: 4}
network: {latency: {model: unit-square, scale: 100ms}, latency_bucket: 5ms}
topics: {count: 6, subscriptions: {model: zipf, alpha: 0.8, size: 3}}
workload: {publishers: 7, rate: 5/s, duration: 20s, warmup: 2s}
faults: [{at: 5s, action: kill, sample: 3, restart_after: 4s}, {at: 9s, action: stop, nodes: [n1]}]
"""


def test_same_seed_same_plan_and_seeds_differ():
    sc = parse_scenario(SC)
    assert make_plan(sc).model_dump_json() == make_plan(sc).model_dump_json()
    assert make_plan(sc, 4).model_dump_json() != make_plan(sc).model_dump_json()


def test_plan_follows_the_scenario():
    plan = make_plan(parse_scenario(SC))
    assert len(plan.nodes) == 40
    assert [n.group for n in plan.nodes[:6]] == ["fast"] * 5 + ["default"]
    assert plan.nodes[0].bandwidth_up == 10**9 and plan.nodes[9].bandwidth_up == 50_000_000
    assert all(len(n.subscriptions) == 3 for n in plan.nodes)
    assert sum(len(n.dial) for n in plan.nodes) == 40 * 4  # d = 4 outgoing per node, no duplicates
    assert all(len(n.neighbours) >= 4 for n in plan.nodes)
    for n in plan.nodes:  # neighbours are symmetric
        for p in n.neighbours:
            assert n.id in plan.node(p).neighbours
    assert plan.publishes() == 100  # 5/s for 20 s
    assert sum(1 for n in plan.nodes if n.schedule) == 7
    times = sorted(t for n in plan.nodes for t, _, _ in n.schedule)
    assert times[0] == pytest.approx(2.0) and times[-1] < 22.0
    kills = [f for f in plan.faults if f.action == "kill"]
    restarts = [f for f in plan.faults if f.action == "restart"]
    assert len(kills) == 3 and sorted(f.node for f in kills) == sorted(f.node for f in restarts)
    assert all(f.at == 9.0 for f in restarts)
    assert any(f.action == "stop" and f.node == "n1" for f in plan.faults)


def test_latency_is_bucketed_and_within_the_square():
    plan = make_plan(parse_scenario(SC))
    for a in ("n0", "n7", "n30"):
        for b in ("n2", "n11"):
            d = plan.one_way_ms(a, b)
            assert d % 5 == pytest.approx(0) or d % 5 == pytest.approx(5)
            assert 0 <= d <= 100 * 2**0.5 + 2.5


def test_interest_rate_and_complete_topology():
    sc = parse_scenario("name: p\nnodes: {count: 200}\ntopics: {count: 10, subscriptions: {model: interest, rate: 0.3}}")
    plan = make_plan(sc)
    total = sum(len(n.subscriptions) for n in plan.nodes)
    assert 0.25 < total / 2000 < 0.35
    assert all(len(n.neighbours) == 199 for n in plan.nodes)
    assert sum(len(n.dial) for n in plan.nodes) == 200 * 199 // 2


def test_interval_pacing_is_per_publisher():
    sc = parse_scenario("name: p\nnodes: {count: 5}\nworkload: {publishers: 5, interval: 1s, duration: 10s}")
    plan = make_plan(sc)
    assert all(len(n.schedule) == 10 for n in plan.nodes)


def test_overlay_algorithms_as_topology():
    base = "name: p\nnodes: {count: 30}\ntopics: {count: 8, subscriptions: {model: zipf, alpha: 0.5, size: 2}}\n"
    tco = make_plan(parse_scenario(base + "topology: {algorithm: cd-max-ref}"))
    same = make_plan(parse_scenario(base + "topology: {algorithm: random, edges_of: cd-max-ref}"))
    edges = lambda plan: sum(len(n.dial) for n in plan.nodes)
    assert edges(tco) == edges(same) > 0
    # every topic's subscribers are connected among themselves in the CD-MAX-Ref topology
    for topic in tco.topics:
        subs = {n.id for n in tco.nodes if topic in n.subscriptions}
        if not subs:
            continue
        seen, todo = set(), [next(iter(subs))]
        while todo:
            x = todo.pop()
            if x not in seen:
                seen.add(x)
                todo += [p for p in tco.node(x).neighbours if p in subs]
        assert seen == subs


def test_publishers_can_keep_to_their_topics():
    sc = parse_scenario("name: p\nnodes: {count: 20}\ntopics: {count: 10, subscriptions: {model: zipf, alpha: 0.5, size: 2}}\n"
                        "workload: {publishers: 5, rate: 5/s, duration: 10s, publish_topics: subscribed}")
    plan = make_plan(sc)
    for n in plan.nodes:
        assert all(topic in n.subscriptions for _, topic, _ in n.schedule)


def test_messages_per_publisher_gives_each_publisher_its_turn():
    sc = parse_scenario("name: p\nnodes: {count: 30}\nworkload: {publishers: 22, rate: 10/s, messages_per_publisher: 1}")
    assert sc.workload.duration == pytest.approx(2.2)
    plan = make_plan(sc)
    counts = [len(n.schedule) for n in plan.nodes if n.schedule]
    assert plan.publishes() == 22 and counts == [1] * 22
    times = sorted(t for n in plan.nodes for t, _, _ in n.schedule)
    assert times[1] - times[0] == pytest.approx(0.1)  # the seed's inter-message delay
    with pytest.raises(Exception, match="either duration or messages_per_publisher"):
        parse_scenario("name: p\nnodes: {count: 3}\nworkload: {duration: 5s, messages_per_publisher: 1}")


def test_weighted_regions_place_nodes_by_weight_with_latency_per_direction():
    """gossipsub-interop's network by default: its eight regions drawn by weight (Europe 5599 of
    11326), its one-way latencies, which differ by direction (South America -> South Africa 195 ms,
    back 190)."""
    text = "name: w\nseed: 5\nnodes: {count: 400}\nnetwork: {latency: {model: weighted-regions}}\n"
    plan = make_plan(parse_scenario(text))
    regions = [n.placement["region"] for n in plan.nodes]
    assert 0.42 < regions.count("europe") / 400 < 0.57 and regions.count("south_america") < 10
    where = {r: n.id for n, r in zip(plan.nodes, regions)}
    assert plan.one_way_ms(where["europe"], where["na_east"]) == 70
    assert plan.one_way_ms(where["australia"], where["east_asia"]) == 110
    assert plan.latency_ms == make_plan(parse_scenario(text)).latency_ms  # the seed decides
    own = ("name: w\nnodes: {count: 50}\nnetwork: {latency: {model: weighted-regions, weights: {a: 1, b: 1}, "
           "one_way_ms: {a: {a: 1, b: 30}, b: {a: 40, b: 2}}}}\n")
    plan = make_plan(parse_scenario(own))
    a = next(n.id for n in plan.nodes if n.placement["region"] == "a")
    b = next(n.id for n in plan.nodes if n.placement["region"] == "b")
    assert (plan.one_way_ms(a, b), plan.one_way_ms(b, a)) == (30, 40)
    with pytest.raises(ScenarioError, match="one_way_ms: no latency from b to a"):
        parse_scenario(own.replace("b: {a: 40, b: 2}", "b: {b: 2}"))


def test_random_at_least_gives_every_node_at_least_d_links():
    """gossipsub-interop's random_network_mesh: each node in turn links to random others until it has d."""
    plan = make_plan(parse_scenario("name: r\nseed: 2\nnodes: {count: 60}\ntopology: {algorithm: random-at-least, "
                                    "degree: 20}\n"))
    degrees = [len(n.neighbours) for n in plan.nodes]
    assert min(degrees) == 20 and sum(degrees) / 60 < 26  # the later nodes dial fewer
    assert sum(len(n.dial) for n in plan.nodes) == sum(degrees) // 2


def test_round_robin_subscriptions_give_node_i_topic_i_mod_count():
    """gossipsub-interop's simple-fanout: even nodes on one topic, odd ones on the other; a random topic
    per publish, so a publisher outside it reaches it by fanout."""
    plan = make_plan(parse_scenario("name: f\nnodes: {count: 9}\ntopics: {count: 2, subscriptions: {model: round-robin}}\n"
                                    "workload: {publishers: 6, rate: 2/s, duration: 5s}\n"))
    assert [n.subscriptions for n in plan.nodes] == [["t0"], ["t1"]] * 4 + [["t0"]]
    published = [(n.subscriptions, topic) for n in plan.nodes for _, topic, _ in n.schedule]
    assert any(topic not in subs for subs, topic in published) and any(topic in subs for subs, topic in published)
