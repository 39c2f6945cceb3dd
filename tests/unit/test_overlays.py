"""Overlay construction: properties on random inputs, the CD-MAX seed's Example 3, determinism."""
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.overlays import (
    ALGORITHMS,
    DIAMETER_TWO,
    TOPIC_CONNECTED,
    build,
    members_of,
    overlay_metrics,
    stars,
    zipf_interest,
)
from orchestrator.model.overlays.graph import topic_connected, topic_diameter
from tests.support.cli import peerlab


@st.composite
def workloads(draw):
    nodes = draw(st.integers(2, 30))
    topics = draw(st.integers(1, 12))
    subs = [set(draw(st.lists(st.integers(0, topics - 1), max_size=5))) for _ in range(nodes)]
    return nodes, topics, subs


def _each_topic(workload, algorithm):
    """The overlay the algorithm builds for the workload, and each topic's members."""
    nodes, topics, subs = workload
    adj = build(algorithm, subs, topics, random.Random(0)).adjacency()
    return [(adj, m) for m in members_of(subs, topics)]


@given(workloads(), st.sampled_from(TOPIC_CONNECTED))
@settings(max_examples=150, deadline=None)
def test_every_topic_is_connected(workload, algorithm):
    for adj, m in _each_topic(workload, algorithm):
        assert topic_connected(adj, m)


@given(workloads(), st.sampled_from(DIAMETER_TWO))
@settings(max_examples=150, deadline=None)
def test_star_algorithms_have_topic_diameter_at_most_two(workload, algorithm):
    for adj, m in _each_topic(workload, algorithm):
        assert topic_diameter(adj, m) <= 2


@given(workloads())
@settings(max_examples=100, deadline=None)
def test_refinement_never_raises_the_maximum_degree(workload):
    nodes, topics, subs = workload
    members = members_of(subs, topics)
    before = max(stars.cd_max(subs, members).overlay().degrees(), default=0)
    after = max(stars.refine(stars.cd_max(subs, members)).overlay().degrees(), default=0)
    assert after <= before


# The seed's Example 3 (Table 2): eight nodes and their topics.
EXAMPLE3 = [{1, 2, 3, 5, 7, 8}, {0, 1, 3, 5, 7, 8, 9}, {1, 4, 5}, {2, 4, 6}, {0, 2, 3, 4, 9}, {2, 3, 6}, {2, 5}, {1, 6}]


def test_example3_cd_max_centres_and_degree():
    members = members_of(EXAMPLE3, 10)
    # interest-group sizes are the seed's "Degree" column
    sb = stars.StarBuilder(EXAMPLE3, members)
    assert [len(sb.interest_group(u)) for u in range(8)] == [7, 6, 6, 6, 6, 6, 6, 5]
    sb = stars.cd_max(EXAMPLE3, members)
    # node 7 takes topics 1 and 6, node 1 the rest of its own, node 2 topic 4, node 6 topic 2
    assert sb.centre == {1: 7, 6: 7, 0: 1, 3: 1, 5: 1, 7: 1, 8: 1, 9: 1, 4: 2, 2: 6}
    assert max(sb.degree(u) for u in range(8)) == 6


def test_example3_refinement_reaches_the_seeds_maximum_degree():
    members = members_of(EXAMPLE3, 10)
    # the seed's final centres after CD-MAX-Ref: {5,7,8} -> 0, {0,3,9} -> 4, 1 -> 1, 6 -> 5, 4 -> 2, 2 -> 6
    seed_final = stars.StarBuilder(EXAMPLE3, members)
    for topic, centre in {5: 0, 7: 0, 8: 0, 0: 4, 3: 4, 9: 4, 1: 1, 6: 5, 4: 2, 2: 6}.items():
        seed_final.make_centre(centre, topic)
    seed_max = max(seed_final.degree(u) for u in range(8))
    ours = stars.refine(stars.cd_max(EXAMPLE3, members))
    assert seed_max == 5
    assert max(ours.degree(u) for u in range(8)) == seed_max


def test_greedy_merge_on_a_known_case():
    # three nodes share topic 0; nodes 0 and 1 also share topics 1 and 2: GM links 0-1 first (gain 3)
    subs = [{0, 1, 2}, {0, 1, 2}, {0}]
    ov = build("gm", subs, 3, random.Random(0))
    assert (0, 1) in ov.edges and len(ov.edges) == 2


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_same_seed_same_overlay(algorithm):
    subs = zipf_interest(60, 20, 0.5, 4, random.Random(3))
    a = build(algorithm, subs, 20, random.Random(9))
    b = build(algorithm, subs, 20, random.Random(9))
    assert a.edges == b.edges


def test_metrics_count_degrees_and_edges():
    subs = zipf_interest(100, 20, 0.5, 3, random.Random(1))
    members = members_of(subs, 20)
    ov = build("cd-max-ref", subs, 20, random.Random(0))
    m = overlay_metrics(ov, members, diameter=True)
    assert m["edges"] == len(ov.edges) and m["avg_degree"] == pytest.approx(2 * len(ov.edges) / 100)
    assert m["connected_topics"] == 1.0 and m["max_topic_diameter"] <= 2
    # a star per topic cannot do better than the largest topic's other subscribers
    assert m["max_degree"] >= max(len(x) for x in members) - 1


def test_cli_compare_json():
    result = peerlab("overlay", "--compare", "--nodes", "40", "--topics", "10", "--subscriptions", "3",
                     "--runs", "3", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == set(ALGORITHMS)
    for alg, metrics in data.items():
        for key in ("avg_degree", "max_degree", "seconds"):
            assert set(metrics[key]) == {"mean", "ci95"}
    assert data["complete"]["avg_degree"]["mean"] == 39
    assert data["cd-max-ref"]["connected_topics"]["mean"] == 1.0


def test_cli_rejects_bad_arguments():
    result = peerlab("overlay", "--subscriptions", "20", "--topics", "10")
    assert result.returncode == 2 and "--subscriptions" in result.stderr
