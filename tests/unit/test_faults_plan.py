"""The fault timeline as planned: churn models, traces, partitions, degradations, joins, and the
errors that name the field to fix."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario

BASE = "name: f\nnodes: {count: 40}\nprotocol: gossipsub\nworkload: {publishers: 4, rate: 2/s, warmup: 5s, duration: 300s, drain: 5s}\n"


def plan_of(extra: str, **kw):
    return make_plan(parse_scenario(BASE + extra, **kw))


def test_session_model_cycles_the_fraction_with_the_session_mean():
    plan = plan_of("churn: {fraction: 0.3, session: {distribution: exponential, mean: 20s}, "
                   "downtime: {mean: 10s}}\n")
    churned = {f.node for f in plan.faults}
    assert len(churned) == 12  # 30% of 40
    assert {f.action for f in plan.faults} == {"kill", "restart"} and all(f.source == "churn" for f in plan.faults)
    sessions, downs = [], []
    for node in churned:
        times = [f for f in plan.faults if f.node == node]
        actions = [f.action for f in times]
        assert actions[::2] == ["kill"] * len(actions[::2]) and set(actions[1::2]) <= {"restart"}
        up_since = 0.0
        for f in times:
            if f.action == "kill":
                sessions.append(f.at - up_since)
                down_at = f.at
            else:
                downs.append(f.at - down_at)
                up_since = f.at
    # residual sessions of a memoryless model have the same mean; a loose band around 20 s and 10 s
    assert 15 < statistics.mean(sessions) < 26 and 7 < statistics.mean(downs) < 13
    assert max(f.at for f in plan.faults if f.action == "kill") < 305  # departures stop with publishing


@pytest.mark.parametrize("dist", ["pareto", "weibull"])
def test_heavy_tailed_sessions_keep_their_mean(dist):
    from random import Random

    from orchestrator.model.churn import draw
    from orchestrator.model.sections import Lifetime

    life = Lifetime(distribution=dist, mean=20.0, shape=2.5 if dist == "pareto" else 0.7)
    rng = Random(3)
    assert statistics.mean(draw(life, rng) for _ in range(40_000)) == pytest.approx(20.0, rel=0.06)


def test_rejoin_new_brings_reserve_nodes_that_are_absent_at_t0():
    plan = plan_of("churn: {fraction: 0.2, session: {mean: 40s}, downtime: {mean: 5s}, rejoin: new, reserve: 15}\n",
                   overrides=["workload.duration=60s"])
    joins = [f for f in plan.faults if f.action == "join"]
    assert joins and not [f for f in plan.faults if f.action == "restart"]
    absent = {n.id for n in plan.nodes if n.absent}
    assert len(absent) == 15 and {f.node for f in joins} <= absent
    for f in joins:
        assert plan.node(f.node).joins_at == f.at
    assert not any(plan.node(p).absent for n in plan.nodes for p in [n.id] if n.schedule)  # publishers present


def test_a_reserve_too_small_says_how_large_it_must_be():
    with pytest.raises(ScenarioError) as err:
        plan_of("churn: {fraction: 0.5, session: {mean: 10s}, rejoin: new, reserve: 2}\n")
    assert "churn.reserve" in str(err.value) and "new identities" in str(err.value)


def test_trace_file_drives_joins_departures_and_restarts(tmp_path: Path):
    trace = tmp_path / "churn.csv"
    trace.write_text("time,node,event\n# n5 is absent at T0\n10,n5,up\n3.5,n2,down\n8,n2,up\n20,n5,down\n")
    plan = plan_of(f"churn: {{trace: {trace}, departure: stop}}\n", data_roots=[tmp_path])
    assert [(f.at, f.action, f.node) for f in plan.faults] == [
        (3.5, "stop", "n2"), (8.0, "restart", "n2"), (10.0, "join", "n5"), (20.0, "stop", "n5")]
    assert plan.node("n5").absent and plan.node("n5").joins_at == 10.0 and not plan.node("n2").absent


@pytest.mark.parametrize("line, says", [
    ("5,n99,up", "field 2: not a node of this scenario"),
    ("x,n1,up", "field 1: not a number of seconds"),
    ("5,n1,sideways", "`up` or `down`"),
    ("900,n1,down", "outside the run"),
    ("5,n1", "expected `seconds,node,up|down`"),
])
def test_trace_errors_name_the_line(tmp_path: Path, line: str, says: str):
    trace = tmp_path / "t.csv"
    trace.write_text(f"1,n3,down\n{line}\n")
    with pytest.raises(ScenarioError) as err:
        plan_of(f"churn: {{trace: {trace}}}\n", data_roots=[tmp_path])
    assert f"{trace} line 2" in str(err.value) and says in str(err.value)
    assert line not in str(err.value)  # the file's text is never echoed


def test_trace_must_be_a_file(tmp_path: Path):
    with pytest.raises(ScenarioError, match="churn.trace: .* is not a regular file"):
        plan_of(f"churn: {{trace: {tmp_path}}}\n", data_roots=[tmp_path])
    with pytest.raises(ScenarioError, match="churn.trace: no such file"):
        plan_of(f"churn: {{trace: {tmp_path}/none.csv}}\n", data_roots=[tmp_path])


def test_partition_and_degrade_expand_into_timed_events():
    plan = plan_of("faults:\n"
                   "  - {at: 10s, action: partition, groups: [[n0, n1, n2]], duration: 10s}\n"
                   "  - {at: 30s, action: partition, split: 0.25}\n"
                   "  - {at: 35s, action: heal}\n"
                   "  - {at: 5s, action: degrade, nodes: [n7], delay: 100ms, loss: 0.1, bandwidth: 5mbit, duration: 4s}\n")
    steps = [(f.at, f.action, f.node) for f in plan.faults]
    assert steps == [(5.0, "degrade", "n7"), (9.0, "restore", "n7"), (10.0, "partition", ""), (20.0, "heal", ""),
                     (30.0, "partition", ""), (35.0, "heal", "")]
    first, second = plan.faults[2].groups, plan.faults[4].groups
    assert first[0] == ["n0", "n1", "n2"] and len(first[1]) == 37  # the rest form one more side
    assert len(second[0]) == 10 and sorted(second[0] + second[1], key=lambda x: int(x[1:])) == [f"n{i}" for i in range(40)]
    deg = plan.faults[0]
    assert (deg.delay_ms, deg.loss, deg.bandwidth) == (100.0, 0.1, 5_000_000)


@pytest.mark.parametrize("fault, field", [
    ("{at: 1s, action: partition}", "partition: give exactly one of groups"),
    ("{at: 1s, action: partition, split: 0.5, nodes: [n1]}", "applies to the whole network"),
    ("{at: 1s, action: degrade, nodes: [n1]}", "at least one of delay, loss, bandwidth"),
    ("{at: 1s, action: kill, nodes: [n1], delay: 10ms}", "belong on degrade"),
    ("{at: 1s, action: kill, nodes: [n1], duration: 10s}", "duration belongs on partition"),
    ("{at: 1s, action: partition, groups: [[n1, n77]]}", "faults[0].groups: unknown node ids ['n77']"),
    ("{at: 1s, action: join, sample: 2}", None),
])
def test_fault_fields_are_checked(fault: str, field: str | None):
    text = BASE + f"faults: [{fault}]\n"
    if field is None:
        parse_scenario(text)  # valid
        return
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text)
    assert field in str(err.value)


def test_churn_block_needs_one_model():
    with pytest.raises(ScenarioError, match="either fraction and session"):
        parse_scenario(BASE + "churn: {departure: kill}\n")
    with pytest.raises(ScenarioError, match="infinite mean"):
        parse_scenario(BASE + "churn: {fraction: 0.1, session: {distribution: pareto, mean: 5s, shape: 1}}\n")


def test_a_node_joins_only_once():
    with pytest.raises(ScenarioError, match="joins twice"):
        plan_of("faults: [{at: 1s, action: join, nodes: [n3]}, {at: 5s, action: join, nodes: [n3]}]\n")
