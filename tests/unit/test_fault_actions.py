"""The fault actions' table (orchestrator/model/fault_actions.py) is the one place an action is declared:
every row is accepted by the scenario's validator with the keys it requires, expanded by the timeline
with what its `after` key schedules, handled by the executors' rules (fault_rules.step) with the
arguments its row names, timed by the fidelity rule and counted by the limits as the row says; a key
on an action that does not take it, or a name not in the table, is refused naming the fix."""
from __future__ import annotations

import inspect
import typing

import pytest

from analysis import faults as analysis_faults
from orchestrator.cli.scenario import _fault_target
from orchestrator.faults import rules as fault_rules
from orchestrator.faults.live_run import LiveFaults
from orchestrator.faults.next_shapes import LinkFaults
from orchestrator.fidelity import rule
from orchestrator.model import fault_actions, limits
from orchestrator.model.fault_actions import ACTIONS, GROUPS, LINKS, NAMES, PROCESS, FaultExecutor
from orchestrator.model.plan import FaultEvent, make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario
from orchestrator.model.sections import Fault
from orchestrator.sim.engine import Simulation

BASE = ("name: t\nnodes: {count: 8}\nprotocol: gossipsub\n"
        "workload: {publishers: 2, rate: 1/s, warmup: 2s, duration: 20s, drain: 2s}\n")
BY_KIND = {"latency": ("40ms", 0.04), "share": ("0.1", 0.1), "rate": ("5mbit", 5_000_000)}  # as written, as read
VALUES = {"nodes": "[n3]", "sample": "2", "restart_after": "2s", "groups": "[[n0, n1]]", "split": "0.5",
          "duration": "3s", **{q.key: BY_KIND[q.kind][0] for q in fault_actions.QUANTITIES}}


def fault(action: str, *keys: str) -> str:
    return "{" + ", ".join([f"at: 5s, action: {action}"] + [f"{k}: {VALUES[k]}" for k in keys]) + "}"


def required(row: fault_actions.FaultAction) -> list[str]:
    """The first key of each group the row requires: a fault its validator accepts."""
    return [g.keys[0] for g in row.requires]


def events(text: str) -> list[FaultEvent]:
    return make_plan(parse_scenario(BASE + f"faults: [{text}]\n")).faults


class Recorder:
    def __getattr__(self, method):
        return lambda *args: (method, args)


def test_the_types_take_their_actions_from_the_table():
    assert typing.get_args(Fault.model_fields["action"].annotation) == NAMES
    assert typing.get_args(FaultEvent.model_fields["action"].annotation) == NAMES
    assert {q.key for q in fault_actions.QUANTITIES} <= set(Fault.model_fields)
    assert {q.event for q in fault_actions.QUANTITIES} <= set(FaultEvent.model_fields)
    assert rule.LINK_CHANGES == tuple(a.name for a in ACTIONS.values() if a.changes == "links")


@pytest.mark.parametrize("name", NAMES)
def test_every_action_is_accepted_expanded_and_handled_as_its_row_says(name):
    row = ACTIONS[name]
    keys = required(row) + ([row.after.key] if row.after else [])
    planned = events(fault(name, *keys))
    first = planned[0]
    assert first.action == name and first.at == 5.0
    assert bool(first.node) == row.on_nodes
    for q in row.quantities:  # carried, in the executors' units (those given: the first of each group)
        assert getattr(first, q.event) == (BY_KIND[q.kind][1] * q.scale if q.key in keys else 0)
    if row.after:  # what its `after` key schedules, on the same target, that long after
        later = [e for e in planned if e.action == row.after.action and e.node == first.node]
        assert later and later[0].at > first.at
    # the rules call the row's method with the event's fields its row names
    up = row.only_if != "down"
    method, args = fault_rules.step(first, Recorder(), lambda n: up, {first.node} if row.only_if == "degraded" else set())
    assert method == row.method and args == tuple(getattr(first, a) for a in row.args)
    assert _fault_target(first) is not None  # `peerlab plan` describes it
    # the limits count at least its events (one with the sides as every node)
    assert limits.fault_events(parse_scenario(BASE + f"faults: [{fault(name, *keys)}]\n")) >= len(planned)


@pytest.mark.parametrize("name", [n for n in NAMES if ACTIONS[n].only_if])
def test_an_action_whose_condition_does_not_hold_is_skipped_saying_why(name):
    row = ACTIONS[name]
    event = FaultEvent(at=3, action=name, node="n1")
    said = fault_rules.step(event, Recorder(), lambda n: row.only_if != "running", set())
    assert isinstance(said, fault_rules.Skipped) and said.startswith(f"{name} of n1 at 3s: ") and said.endswith("; skipped")


@pytest.mark.parametrize("name", NAMES)
def test_a_node_action_leaves_its_node_as_its_condition_foresees(name):
    """The live run's exit watch expects a node's end from an action that leaves it down (its exit is
    the timeline's, not a crash) and watches it again after one that leaves it up: each process row
    says which, the one its condition implies (a running node goes down, a down one comes up); only
    a SIGKILL is in effect once issued."""
    row = ACTIONS[name]
    implied = {"running": "down", "down": "up"}.get(row.only_if) if row.changes == PROCESS else None
    assert row.leaves_node == implied
    assert row.instant == (row.method == "kill")


@pytest.mark.parametrize("name", NAMES)
def test_every_method_a_row_calls_is_the_executors_with_the_rows_arguments(name):
    row = ACTIONS[name]
    # the link actions, live and simulated, are the link faults' next shapes, applied whole (__getattr__)
    executors = (FaultExecutor, LinkFaults) if row.changes == LINKS else (FaultExecutor, Simulation, LiveFaults)
    for executor in executors:
        params = list(inspect.signature(getattr(executor, row.method)).parameters)[1:]
        assert tuple(params) == row.args, (executor, row.method)
    assert callable(getattr(LiveFaults(None, None, {}, LinkFaults({}, 1), None, None), row.method))
    assert callable(getattr(Simulation(make_plan(parse_scenario(BASE))), row.method))


@pytest.mark.parametrize("name", NAMES)
def test_a_key_on_an_action_that_does_not_take_it_is_refused_naming_where_it_belongs(name):
    row = ACTIONS[name]
    for g in GROUPS:
        if row.allows(g):
            continue
        with pytest.raises(ScenarioError) as err:
            parse_scenario(BASE + f"faults: [{fault(name, *required(row), g.keys[0])}]\n")
        said = str(err.value)
        owners = [a.name for a in ACTIONS.values() if a.allows(g)]
        assert "applies to the whole network" in said if g is fault_actions.TARGET else (
            g.keys[0] in said and all(o in said for o in owners)), said


@pytest.mark.parametrize("name", [n for n in NAMES if ACTIONS[n].requires])
def test_an_action_without_the_keys_it_requires_is_refused_naming_them(name):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(BASE + f"faults: [{fault(name)}]\n")
    assert f"{name}: give " in str(err.value) and ACTIONS[name].requires[0].keys[0] in str(err.value)


def test_a_name_not_in_the_table_is_refused_naming_the_ones_it_holds():
    with pytest.raises(ScenarioError) as err:
        parse_scenario(BASE + "faults: [{at: 1s, action: teleport, nodes: [n1]}]\n")
    assert "faults[0].action" in str(err.value) and "teleport" in str(err.value)
    assert all(f"'{n}'" in str(err.value) for n in NAMES), str(err.value)
    with pytest.raises(ValueError, match="unknown fault action 'teleport'; known: kill, stop"):
        fault_rules.step(FaultEvent.model_construct(at=1.0, action="teleport", node="n1"), Recorder(), bool, set())
    assert fault_actions.complaint("teleport", []) == f"unknown fault action 'teleport'; known: {', '.join(NAMES)}"


@pytest.mark.parametrize("name", NAMES)
def test_the_fidelity_rule_times_each_action_as_its_row_says(name):
    t0 = 10**12
    rec = {"action": name, "at": 4.0, "offset_s": 9.0, "t_ns": t0 + 9 * 10**9, "issued_ns": t0 + 7 * 10**9}
    [(_, late)] = rule.fault_lateness([rec])  # issued 3 s late, took effect 5 s late
    assert late == pytest.approx(5.0 if ACTIONS[name].lateness == "took effect" else 3.0)
    why = rule.fault_reasons([rec])
    assert ("changing the links" in why[0]) == (ACTIONS[name].changes == "links")


def test_the_analysis_reads_the_manifest_by_the_tables_names():
    """analysis/ may not import the table: the names it reads in `faults_executed` are its own words,
    held here to the rows they mean (a kill is down once issued; a partition ends at a heal)."""
    assert ACTIONS[analysis_faults.KILL].instant and ACTIONS[analysis_faults.KILL].leaves_node == "down"
    assert ACTIONS[analysis_faults.PARTITION].after.action == analysis_faults.HEAL
    assert ACTIONS[analysis_faults.HEAL].changes == LINKS and not ACTIONS[analysis_faults.HEAL].requires


def test_the_messages_name_the_key_and_the_fix():
    said = fault_actions.complaint("kill", ["nodes", "duration"])
    assert said.startswith("duration belongs on partition (heal after)") and "degrade (restore after)" in said
    assert fault_actions.complaint("heal", ["restart_after"]) == "restart_after belongs on kill or stop"
    assert fault_actions.complaint("join", ["nodes", "split"]) == "groups and split belong on partition"
    assert fault_actions.complaint("stop", ["sample", "loss"]) == "delay, loss and bandwidth belong on degrade"
    assert fault_actions.complaint("restart", ["nodes", "sample"]) == \
        "restart: give exactly one of nodes (a list of ids) or sample (a count)"
    assert fault_actions.complaint("degrade", ["nodes", "bandwidth", "duration"]) is None
