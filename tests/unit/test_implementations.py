"""`protocol.implementation` and per-group implementations: what a scenario may ask of an adapter,
and the errors that name the field and the fix."""
import pytest

from orchestrator.model.matrix import expand
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario

BASE = """
name: impl
nodes: {count: 6}
protocol: {name: gossipsub, implementation: js-libp2p}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 2, rate: 2/s, duration: 2s}
"""


def _problems(text: str, overrides=()) -> str:
    with pytest.raises(ScenarioError) as e:
        parse_scenario(text, "s.yaml", list(overrides))
    return str(e.value)


def test_an_adapter_node_gets_only_the_parameters_the_scenario_sets():
    sc = parse_scenario(BASE, overrides=["gossipsub.D=4", "gossipsub.D_lo=3", "gossipsub.heartbeat_interval=0.7"])
    node = make_plan(sc).nodes[0]
    assert node.implementation == "js-libp2p"
    assert node.params == {"D": 4, "D_lo": 3, "heartbeat_interval": 0.7}  # js-libp2p's defaults stand otherwise
    peerlab = make_plan(parse_scenario(BASE, overrides=["implementation=peerlab"])).nodes[0]
    assert peerlab.implementation == "peerlab" and "variant" in peerlab.params  # peerlab's node takes them all


def test_unknown_implementation_lists_the_known_ones():
    assert ("protocol.implementation: unknown implementation 'nim-libp2p'; known: peerlab, go-libp2p, js-libp2p, "
            "py-libp2p, rust-libp2p") in _problems(BASE, ["implementation=nim-libp2p"])


def test_an_adapter_runs_only_its_protocols():
    assert "protocol.implementation: js-libp2p runs gossipsub, not floodsub" in _problems(BASE, ["protocol.name=floodsub"])


def test_a_parameter_the_implementation_does_not_take_is_refused_not_ignored():
    text = _problems(BASE, ["gossipsub.variant=v1.1"])
    assert "protocol.params.variant: js-libp2p does not take variant" in text and "implementation: peerlab" in text
    assert "nodes.groups[0].params.stagger_parallel: js-libp2p does not take stagger_parallel" in _problems(
        BASE.replace("nodes: {count: 6}", "nodes:\n  count: 6\n  groups: [{name: g, count: 2, params: {stagger_parallel: 2}}]"))


def test_a_behaviour_the_implementation_cannot_change_is_taken_only_at_its_value():
    py = ["implementation=py-libp2p"]
    text = _problems(BASE, [*py, "gossipsub.flood_publish=true"])
    assert "protocol.params.flood_publish: py-libp2p cannot change flood_publish, it always behaves as " \
           "flood_publish: false; set false, leave it out, or use implementation: peerlab" in text
    node = make_plan(parse_scenario(BASE, overrides=[*py, "gossipsub.flood_publish=false", "gossipsub.D_lazy=4"])).nodes[0]
    assert node.params == {"flood_publish": False, "D_lazy": 4}
    assert "py-libp2p does not take idontwant_threshold" in _problems(BASE, [*py, "gossipsub.idontwant_threshold=100"])


def test_js_and_py_nodes_share_a_run():
    groups = "nodes:\n  count: 6\n  groups: [{name: js, count: 3, implementation: js-libp2p}, " \
             "{name: py, count: 3, implementation: py-libp2p}]"
    plan = make_plan(parse_scenario(BASE.replace("nodes: {count: 6}", groups)))
    assert [n.implementation for n in plan.nodes] == ["js-libp2p"] * 3 + ["py-libp2p"] * 3


def test_attackers_stay_peerlab_only():
    text = _problems(BASE + "attackers: [{behaviour: slow, count: 1}]\n")
    assert "attackers: attack behaviours are peerlab's own nodes'" in text


def test_peerlab_and_libp2p_nodes_cannot_share_a_run():
    mixed = BASE.replace("nodes: {count: 6}", "nodes:\n  count: 6\n  groups: [{name: p, count: 3, implementation: peerlab}]")
    assert "implementations of different wires cannot share a run" in _problems(mixed)


def test_a_group_may_choose_its_implementation():
    all_in_groups = BASE.replace("implementation: js-libp2p", "implementation: peerlab").replace(
        "nodes: {count: 6}", "nodes:\n  count: 6\n  groups: [{name: js, count: 6, implementation: js-libp2p}]")
    plan = make_plan(parse_scenario(all_in_groups))
    assert {n.implementation for n in plan.nodes} == {"js-libp2p"}


def test_implementation_is_a_matrix_axis(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "matrix: {implementation: [peerlab, js-libp2p]}\n")
    combos = expand(path)
    assert [c.scenario.protocol.implementation for c in combos] == ["peerlab", "js-libp2p"]


@pytest.mark.parametrize("name", ["go-libp2p", "rust-libp2p", "js-libp2p", "py-libp2p"])
def test_every_adapter_refuses_what_it_cannot_take_and_names_what_it_can(name):
    text = _problems(BASE, [f"implementation={name}", "gossipsub.stagger_parallel=2"])
    assert f"protocol.params.stagger_parallel: {name} does not take stagger_parallel" in text
    assert "heartbeat_interval" in text  # the ones it takes
    fixed = _problems(BASE, [f"implementation={name}", "gossipsub.msg_id=hash"])
    assert "protocol.params.msg_id" in fixed and name in fixed


def test_validation_as_cpu_work_goes_to_the_adapters_that_spend_it():
    cpu = ["protocol.params.validation={delay: 0.005, work: cpu}"]
    for name in ("go-libp2p", "rust-libp2p"):
        node = make_plan(parse_scenario(BASE, overrides=[f"implementation={name}", *cpu])).nodes[0]
        assert node.params["validation"]["work"] == "cpu" and node.params["validation"]["delay"] == 0.005
    problems = _problems(BASE, ["implementation=peerlab", *cpu])
    assert "protocol.params.validation.work: cpu is spent by the go-libp2p and rust-libp2p adapters" in problems
    assert "work sleep" in problems
    assert "js-libp2p does not take validation" in _problems(BASE, cpu)
