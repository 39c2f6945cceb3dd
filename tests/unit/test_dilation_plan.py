"""Time dilation in the scenario and the plan (orchestrator/model/dilation.py): the plan stays in
experiment time, the links' shapes get every latency times k and every rate divided by k (a degrade's
too: orchestrator/faults/next_shapes.py), and adapter nodes, whose libraries' timers are not all settable, are
refused with the timers named."""
import pytest

from orchestrator.faults.next_shapes import LinkFaults
from orchestrator.model.link_shape import link_shapes
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario
from tests.support.scenarios import GOSSIPSUB_TEN_SQUARE, scenario_text

SCENARIO = scenario_text("dilated", 4, GOSSIPSUB_TEN_SQUARE, """\
faults:
  - {at: 3s, action: degrade, nodes: [n4], delay: 40ms, loss: 0.1, bandwidth: 6mbit, duration: 2s}
  - {at: 4s, action: kill, nodes: [n5], restart_after: 1.5s}
  - {at: 4.5s, action: partition, groups: [[n0, n1]], duration: 1s}
churn: {fraction: 0.2, session: {mean: 4s}}
""")


def _plan(k: float):
    return make_plan(parse_scenario(SCENARIO, overrides=[f"dilation={k}"]))


def test_the_plan_is_experiment_time_whatever_the_factor():
    plain, dilated = _plan(1), _plan(2.5)
    assert dilated.dilation == 2.5 and plain.dilation == 1
    assert dilated.model_dump(exclude={"dilation"}) == plain.model_dump(exclude={"dilation"})


@pytest.mark.parametrize("k", [2, 2.5])
def test_shaping_gets_latencies_times_k_and_rates_divided_by_k(k):
    plan = _plan(k)
    shapes = link_shapes(plan, k)
    for node in plan.nodes:
        shape = shapes[node.id]
        assert shape.peers and not shape.cut_from
        for peer in shape.peers:
            assert shape.delay_to(peer) == pytest.approx(k * plan.one_way_ms(node.id, peer))
        assert shape.jitter_ms == pytest.approx(k * plan.jitter_ms) and plan.jitter_ms == 3
        assert shape.loss == plan.loss
        assert (shape.up_bps, shape.down_bps) == (round(node.bandwidth_up / k), round(node.bandwidth_down / k))
    assert {s.up_bps for s in shapes.values()} == {round(8e6 / k), round(40e6 / k)}
    # a degrade as the run applies it: its latency times k, its bandwidth divided by k, its loss as is
    degrade = next(f for f in plan.faults if f.action == "degrade")
    (degraded,) = LinkFaults(shapes, k).degrade(degrade.node, degrade.delay_ms, degrade.loss, degrade.bandwidth)
    assert degraded.added_delay_ms == pytest.approx(40 * k) and degraded.added_loss == 0.1
    assert degraded.up_bps == degraded.down_bps == round(6e6 / k)
    assert degraded.delays == shapes[degrade.node].delays
    # the plan itself is untouched: experiment time, its faults (churn's too) as planned
    assert plan.nodes[5].bandwidth_up == 40_000_000 and plan.one_way_ms("n0", "n1") <= 95
    assert degrade.delay_ms == 40 and degrade.bandwidth == 6_000_000 and any(f.source == "churn" for f in plan.faults)


def test_factor_one_shapes_the_plan_as_it_is():
    plan = _plan(1)
    shapes = link_shapes(plan, 1)
    for node in plan.nodes:
        shape = shapes[node.id]
        assert (shape.up_bps, shape.down_bps, shape.jitter_ms) == (node.bandwidth_up, node.bandwidth_down, 3)
        assert all(shape.delay_to(p) == plan.one_way_ms(node.id, p) for p in shape.peers)
    degrade = next(f for f in plan.faults if f.action == "degrade")
    (degraded,) = LinkFaults(shapes, 1).degrade(degrade.node, degrade.delay_ms, degrade.loss, degrade.bandwidth)
    assert (degraded.added_delay_ms, degraded.up_bps) == (40, 6_000_000)


def _refused(overrides: list[str], scenario: str = "scenarios/gossipsub-implementations.yaml") -> str:
    from orchestrator.model.scenario import load_scenario
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario, overrides)
    (problem,) = err.value.problems
    return problem


def test_js_libp2p_nodes_are_refused_naming_the_timers_it_cannot_scale():
    problem = _refused(["dilation=2", "implementation=js-libp2p"])
    assert problem == (
        "dilation: 2 runs every timer of every node 2 times slower, but protocol.implementation is js-libp2p, "
        "which cannot scale all of its timers (in @libp2p/gossipsub 17.1.1 these timers are constants of the "
        "module, not options: GossipsubHeartbeatInitialDelay (100 ms: the first heartbeat after start); "
        "TimeCacheDuration (120 s: how long the peer score keeps a message's delivery record); "
        "ACCEPT_FROM_WHITELIST_DURATION_MS (1 s: how long a well-scored peer's messages skip the graylist "
        "check)). Run js-libp2p undilated (leave dilation out, or set it to 1; no --dilate), or dilate a run "
        "of implementation: peerlab nodes")


def test_py_libp2p_nodes_are_refused_naming_the_timers_it_cannot_scale():
    problem = _refused(["dilation=1.5", "implementation=py-libp2p"])
    assert problem.startswith("dilation: 1.5 runs every timer of every node 1.5 times slower, but "
                              "protocol.implementation is py-libp2p, which cannot scale all of its timers (in "
                              "py-libp2p 0.8.1 these timers are not arguments of GossipSub or Pubsub: "
                              "graft_flood_threshold (10 s: a GRAFT this soon after a PRUNE is penalised")
    for timer in ("_PEER_STREAM_BACKOFF_INITIAL and _PEER_STREAM_BACKOFF_MAX (0.5 s doubling to 10 s",
                  "_ANNOUNCE_RETRY_JITTER_MS (up to 1 s", "whole seconds of the wall clock (int(time.time()))"):
        assert timer in problem
    assert problem.endswith("Run py-libp2p undilated (leave dilation out, or set it to 1; no --dilate), or "
                            "dilate a run of implementation: peerlab nodes")


def test_a_mixed_network_is_refused_at_its_first_adapter_group_and_undilated_runs_pass():
    problem = _refused(["dilation=3"], "scenarios/gossipsub-mixed.yaml")
    assert problem.startswith("dilation: 3 runs every timer") and "nodes.groups[0].implementation is go-libp2p" in problem
    from orchestrator.model.scenario import load_scenario
    assert load_scenario("scenarios/gossipsub-mixed.yaml", ["dilation=1"]).dilation == 1
    assert load_scenario("scenarios/gossipsub-implementations.yaml", ["dilation=4"]).dilation == 4  # peerlab's


@pytest.mark.parametrize("k", ["0.5", "0", "101"])
def test_a_factor_out_of_range_is_a_scenario_error(k):
    with pytest.raises(ScenarioError, match="dilation: Input should be"):
        parse_scenario("name: x\nnodes: {count: 2}\n", overrides=[f"dilation={k}"])


@pytest.mark.slow
def test_peerlab_run_dilate_sets_the_field_and_refuses_before_anything_runs():
    from tests.support.cli import peerlab
    refused = peerlab("run", "scenarios/gossipsub-mixed.yaml", "--dilate", "2", timeout=60)
    assert refused.returncode == 2 and "dilation: 2 runs every timer of every node" in refused.stderr
    assert "go-libp2p, which cannot scale all of its timers" in refused.stderr and not refused.stdout
    low = peerlab("run", "scenarios/quickstart.yaml", "--dilate", "0.5", timeout=60)
    assert low.returncode == 2 and "dilation: Input should be greater than or equal to 1 (got 0.5)" in low.stderr
