"""Planning Topiary runs: protocol-implied topologies, d, the directory, attackers, Scribe trees and the
latency models that join the registry (regions, WonderProxy cities, matrix files)."""
import collections
import json
import random

import pytest

from analysis.extras.overlay_epochs import outgoing_share
from orchestrator.model.overlays import build, members_of
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario

SC = """
name: t
seed: 2
nodes: {count: 30}
protocol: topiary
topology: {degree: 4}
topics: {count: 6, subscriptions: {model: interest, rate: 0.3}}
workload: {publishers: 10, rate: 5/s, duration: 10s}
"""


def plan_of(text=SC, overrides=(), data_roots=()):
    return make_plan(parse_scenario(text, overrides=list(overrides), data_roots=list(data_roots)))


def test_topiary_starts_from_d_random_outgoing_links_and_knows_every_node():
    plan = plan_of()
    assert plan.topology == "random"
    for n in plan.nodes:
        assert len(n.dial) == 4 and n.params["degree"] == 4
        assert n.contacts == [f"n{i}" for i in range(30) if f"n{i}" != n.id]
    assert plan.nodes[0].params["epoch"] == 10.0


def test_baselines_bring_their_topology_and_static_protocols_keep_only_neighbours():
    assert plan_of(overrides=["protocol=random-overlay"]).topology == "random"
    assert plan_of(overrides=["protocol=complete-overlay"]).topology == "complete"
    split = plan_of(overrides=["protocol=degree-split"])
    assert split.topology == "degree-split"
    assert all(n.contacts == n.neighbours for n in split.nodes)
    rnd = plan_of(overrides=["protocol=random-overlay"])
    assert [len(n.dial) for n in rnd.nodes] == [4] * 30  # the same d as topiary


def test_scenario_errors_name_the_field_and_the_fix():
    with pytest.raises(ScenarioError, match="topology.algorithm: topiary always starts from random"):
        plan_of(overrides=["topology.algorithm=cd-max"])
    with pytest.raises(ScenarioError, match="protocol.params.degree: set topology.degree instead"):
        plan_of(overrides=["protocol.params.degree=5"])
    with pytest.raises(ScenarioError, match=r"attackers\[0\].topic: 't9' is not a topic"):
        plan_of(SC + "attackers: [{behaviour: topic-drop, count: 3, topic: t9}]\n")
    with pytest.raises(ScenarioError, match="topic is required for topic-drop"):
        plan_of(SC + "attackers: [{behaviour: topic-drop, count: 3}]\n")
    with pytest.raises(ScenarioError, match="fewer than workload.publishers"):
        plan_of(SC + "attackers: [{behaviour: censor, count: 25}]\n")


def test_attackers_are_sampled_never_publish_and_topic_droppers_join_the_victim_topic():
    plan = plan_of(SC + "attackers: [{behaviour: topic-drop, count: 6, topic: t2}, {behaviour: slow, count: 2, delay: 300ms}]\n")
    roles = collections.Counter(n.role for n in plan.nodes)
    assert roles == {"honest": 22, "topic-drop": 6, "slow": 2}
    for n in plan.nodes:
        if n.role == "topic-drop":
            assert "t2" in n.subscriptions and n.behaviour == {"behaviour": "topic-drop", "count": 6, "topic": "t2",
                                                               "delay": 0.2, "court": 4, "rate": 10.0, "ids": 500, "size": 1024}
            assert not n.schedule
        if n.role == "slow":
            assert n.behaviour["delay"] == pytest.approx(0.3) and not n.schedule


def test_eclipse_attackers_are_fully_connected_and_court_honest_nodes():
    plan = plan_of(SC + "attackers: [{behaviour: eclipse, count: 5, court: 3}]\n")
    eclipse = [n for n in plan.nodes if n.role == "eclipse"]
    ids = {n.id for n in eclipse}
    for n in eclipse:
        assert set(n.neighbours) >= ids - {n.id}
        assert set(n.behaviour["colluders"]) == ids - {n.id}
        assert len(set(n.neighbours) - ids) >= 3


def test_scribe_builds_one_tree_per_group():
    rng = random.Random(1)
    subs = [{t for t in range(5) if rng.random() < 0.4} for _ in range(60)]
    members = members_of(subs, 5)
    by_topic = build("scribe", subs, 5, random.Random(2), groups="topic")
    adj = by_topic.adjacency()
    for group in members:  # a tree over the group: |group| - 1 edges inside it, connected
        inside = {(a, b) for a, b in by_topic.edges if a in group and b in group}
        assert len(inside) >= len(group) - 1
        seen, todo = set(), [min(group)]
        while todo:
            x = todo.pop()
            seen.add(x)
            todo += [y for y in adj[x] if y in group and y not in seen]
        assert seen == group
    random_groups = build("scribe", subs, 5, random.Random(2), groups=6)
    assert len(random_groups.edges) == 60 - 6  # a spanning tree in each of 6 groups


def test_regions_model_uses_half_the_table_rtt():
    plan = plan_of(SC + "network: {latency: {model: regions, regions: [europe, na-east]}}\n")
    assert plan.nodes[0].placement == {"region": "europe"} and plan.nodes[1].placement == {"region": "na-east"}
    assert plan.latency_ms[0][1] == pytest.approx(119.7 / 2)
    assert plan.latency_ms[0][2] == pytest.approx(40.7 / 2)
    with pytest.raises(ScenarioError, match="unknown regions"):
        plan_of(SC + "network: {latency: {model: regions, regions: [mars]}}\n")


def wonderproxy_files(folder, cities: int):
    """A data set in WonderProxy's two CSV formats (the columns of ../shared/data's 2020 files):
    `cities` servers on a grid of coordinates, and a ping RTT for every ordered pair (1 ms per degree
    of longitude and latitude apart, plus 2 ms)."""
    servers = folder / "servers.csv"
    servers.write_text("id,name,title,location,state,country,state_abbv,continent,latitude,longitude,selected\n" +
                       "".join(f"{i},City{i},City{i},,,,,1,{(i % 6) * 10},{(i // 6) * 15},1\n" for i in range(1, cities + 1)))
    pings = folder / "pings.csv"
    rtt = lambda a, b: 2 + abs(a % 6 - b % 6) * 10 + abs(a // 6 - b // 6) * 15  # noqa: E731
    pings.write_text("source,destination,min,avg,max,mdev\n" +
                     "".join(f"{a},{b},0,{rtt(a, b)},0,0\n" for a in range(1, cities + 1)
                             for b in range(1, cities + 1) if a != b))
    return servers, pings


def test_wonderproxy_places_nodes_at_distinct_cities_and_reports_filling(tmp_path):
    servers, pings = wonderproxy_files(tmp_path, cities=40)
    plan = plan_of(SC + f"network: {{latency: {{model: wonderproxy, servers: {servers}, pings: {pings}}}}}\n",
                   data_roots=[tmp_path])
    cities = [n.placement["city"] for n in plan.nodes]
    assert len(set(cities)) == 30 and set(cities) <= {f"City{i}" for i in range(1, 41)}
    index = {f"City{i}": i for i in range(1, 41)}
    for i, a in enumerate(cities):  # one-way = the pair's RTT / 2
        for j, b in enumerate(cities):
            if i != j:
                x, y = index[a], index[b]
                assert plan.latency_ms[i][j] == pytest.approx((2 + abs(x % 6 - y % 6) * 10 + abs(x // 6 - y // 6) * 15) / 2)
    assert "wonderproxy: 30 nodes at 30 cities" in plan.latency_notes[0] and "filled" in plan.latency_notes[0]


@pytest.mark.parametrize("broken, error", [
    ("no servers", "network.latency.servers: .* has no server row"),
    ("no pings", "network.latency.pings: .* has no ping between two servers"),
    ("negative", "network.latency.pings: .* line 2, column avg: an RTT in ms from 0 to 10000"),
])
def test_unusable_wonderproxy_files_are_refused_naming_the_field(tmp_path, broken, error):
    servers, pings = wonderproxy_files(tmp_path, cities=4)
    if broken == "no servers":
        servers.write_text(servers.read_text().splitlines()[0] + "\n")
    elif broken == "no pings":
        pings.write_text("source,destination,min,avg,max,mdev\n7,8,0,10,0,0\n")  # ids no server has
    else:
        pings.write_text("source,destination,min,avg,max,mdev\n1,2,0,-5,0,0\n")
    with pytest.raises(ScenarioError, match=error):
        plan_of(SC.replace("count: 30", "count: 3").replace("publishers: 10", "publishers: 1")
                + f"network: {{latency: {{model: wonderproxy, servers: {servers}, pings: {pings}}}}}\n",
                data_roots=[tmp_path])


def test_wonderproxy_fills_missing_pairs_from_distance(tmp_path):
    servers = tmp_path / "s.csv"
    servers.write_text("id,name,title,location,state,country,state_abbv,continent,latitude,longitude,selected\n"
                       "1,A,A,,,,,1,0,0,1\n2,B,B,,,,,1,0,10,1\n3,C,C,,,,,1,0,20,1\n")
    pings = tmp_path / "p.csv"
    pings.write_text("source,destination,min,avg,max,mdev\n1,2,0,100,0,0\n2,3,0,100,0,0\n3,2,0,100,0,0\n"
                     "9,1,0,5,0,0\n")  # 1->3 and 3->1 never measured; 2->1 only one way; id 9 has no server
    plan = plan_of(SC.replace("count: 30", "count: 3").replace("publishers: 10", "publishers: 1")
                   + f"network: {{latency: {{model: wonderproxy, servers: {servers}, pings: {pings}}}}}\n",
                   data_roots=[tmp_path])
    note = plan.latency_notes[0]
    assert "1 took the reverse direction's RTT and 2 were filled from distance" in note
    by_city = {n.placement["city"]: i for i, n in enumerate(plan.nodes)}
    a, c = by_city["A"], by_city["C"]
    assert plan.latency_ms[a][by_city["B"]] == pytest.approx(50.0)  # one-way: RTT / 2
    assert plan.latency_ms[a][c] == pytest.approx(100.0)  # 2222 km at 100 ms RTT per 1111 km, halved


def test_matrix_file_model(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([[0, 10, 20], [10, 0, 30], [20, 30, 0]]))
    small = SC.replace("count: 30", "count: 3").replace("publishers: 10", "publishers: 1")
    plan = plan_of(small + f"network: {{latency: {{model: matrix, path: {path}}}}}\n", data_roots=[tmp_path])
    assert plan.latency_ms[1][2] == 30.0 and plan.latency_ms[2][0] == 20.0
    with pytest.raises(ScenarioError, match="no such file"):
        plan_of(small + "network: {latency: {model: matrix, path: /nonexistent.csv}}\n")
    with pytest.raises(ScenarioError, match="fewer than the 30 nodes"):
        plan_of(SC + f"network: {{latency: {{model: matrix, path: {path}}}}}\n", data_roots=[tmp_path])


def test_attackers_share_of_outgoing_slots_follows_connects_and_disconnects():
    events = [(1, "h1", "connect", "a1", True), (1, "h1", "connect", "h2", True), (1, "h2", "connect", "h1", False),
              (2, "h2", "connect", "a1", True), (5, "h1", "disconnect", "a1", False)]
    assert outgoing_share(events, {"a1"}, {"h1", "h2"}, [3, 6]) == [pytest.approx(2 / 3), pytest.approx(1 / 2)]


def test_a_plan_runs_unchanged_on_the_in_memory_network():
    from orchestrator.sim.outcomes import per_window, run_in_memory

    text = (SC.replace("duration: 10s", "duration: 30s, publish_topics: subscribed")
            + "attackers: [{behaviour: censor, count: 4}]\n")
    plan = plan_of(text, ["protocol.params.epoch=5", "network.latency={model: unit-square, scale: 100ms}"])
    outcomes = run_in_memory(plan)
    assert len(outcomes) == plan.publishes() == 150
    censors = {n.id for n in plan.nodes if n.role == "censor"}
    assert all(m.expected == len({n.id for n in plan.nodes if m.topic in n.subscriptions} - censors) - 1
               for m in outcomes)  # publishers are honest subscribers; attackers are not expected receivers
    rate, delay = per_window(outcomes, plan.warmup, 5.0, 6)
    assert len(rate) == 6 and min(rate) > 0.8 and all(d > 0 for d in delay)
