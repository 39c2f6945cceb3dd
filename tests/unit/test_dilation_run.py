"""Time dilation in the orchestrator: what a node is given (the dilated clock, transport delays in real
ms), and the times the orchestrator stamps itself (link counter samples, clock offsets) in experiment
time; admission counts a dilated run's CPU per real second."""
import asyncio
import json
import re
import time

import pytest

from node.dilation import Dilation
from orchestrator.model import dilation as dilation_rules
from orchestrator.model.link_shape import link_shapes
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.run import admission, clock, link_sampler, node_configs
from orchestrator.run.admission import Machine
from orchestrator.shaping.mechanisms import LinkEnds, TransportShaper
from tests.support.loopback_backend import RecordedOps
from tests.support.scenarios import GOSSIPSUB_SIXTEEN, scenario_text

SCENARIO = scenario_text("dilated", 2, GOSSIPSUB_SIXTEEN, "network: {latency: {model: constant, one_way: 20ms}, "
                         "jitter: 3ms}\nworkload: {publishers: 2, rate: 2/s, duration: 3s}\n")


class Backend:
    def __init__(self):
        self.namespaces = RecordedOps()  # no kernel: transport mode's latency is the node's

    def address(self, node):
        return "10.0.0." + node[1:]

    def data_port(self, node):
        return 7000

    def control_endpoint(self, node):
        return {"unix": f"/tmp/{node}.sock"}

    def event_log_path(self, node):
        return f"/tmp/{node}.jsonl"

    def link_ends(self, node):
        return LinkEnds(node, "eth0", "switch", "v" + node[1:])

    def check_stop(self):
        pass

    def link_counters(self):
        return {"n0": {"sent_bytes": 1, "received_bytes": 2, "sent_packets": 3, "received_packets": 4}}


def transport_links(plan, node):
    """What transport mode's shaper gives the node's config, once the links are shaped."""
    shaper = TransportShaper(plan, Backend(), asyncio.to_thread, tell=None, warn=print)
    asyncio.run(shaper.apply_all(link_shapes(plan, plan.dilation).values()))
    return shaper.node_delays(node)


def test_a_node_is_given_the_dilated_clock_and_real_transport_delays():
    plan = make_plan(parse_scenario(SCENARIO, overrides=["dilation=2"]))
    links = transport_links(plan, "n3")
    cfg = node_configs.node_config(plan, "n3", Backend(), run_id="r", token="t" * 16, links=links,
                                   t0_ns=None, ids={}, resources_interval=1.0, dilation=Dilation(2, 123))
    assert cfg.dilation == 2 and cfg.dilation_epoch_ns == 123
    assert cfg.delays_ms and set(cfg.delays_ms.values()) == {40.0}
    assert cfg.jitter_ms == 6 and cfg.schedule == plan.node("n3").schedule
    plan = make_plan(parse_scenario(SCENARIO))
    links = transport_links(plan, "n3")
    plain = node_configs.node_config(plan, "n3", Backend(), run_id="r", token="t" * 16, links=links,
                                     t0_ns=None, ids={}, resources_interval=1.0)
    assert plain.dilation == 1 and set(plain.delays_ms.values()) == {20.0}


def test_link_samples_are_stamped_and_spaced_in_experiment_time(tmp_path, monkeypatch):
    dilation = Dilation(4, time.time_ns() - 40_000_000_000)  # 40 real s ago: 10 experiment s ago
    sampler = link_sampler.LinkSampler(Backend(), tmp_path / "k.jsonl", dilation)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds):
        slept.append(seconds)
        await real_sleep(0)

    async def go():
        monkeypatch.setattr(asyncio, "sleep", sleep)
        assert await sampler.start()
        while len(slept) < 2:
            await real_sleep(0.01)
        await sampler.stop()
    asyncio.run(go())
    (first, *_) = [json.loads(line) for line in (tmp_path / "k.jsonl").read_text().splitlines()]
    assert (first["ts"] - dilation.epoch_ns) / 1e9 == pytest.approx(10, abs=1)
    assert 3.0 < slept[0] <= 4 * link_sampler.INTERVAL_S  # 4 real s, less the moment since the loop began


def test_clock_offsets_are_measured_on_the_experiment_clock():
    dilation = Dilation(2, time.time_ns() - 20_000_000_000)

    class Node:
        async def get(self, path, **_):
            return {"ns": dilation.time_ns() + 3_000_000}  # 3 ms ahead, in experiment time

    measured = asyncio.run(clock.estimate({"n0": Node()}, rounds=2, now_ns=dilation.time_ns))
    assert measured["offsets_ns"]["n0"] == pytest.approx(3_000_000, abs=1_000_000)


def test_admission_counts_the_cpu_per_real_second():
    big = "name: big\nnodes: {count: 600}\n"
    machine = Machine(memory_mib=64_000, cpus=2, fds=100_000, disk_mib=100_000)
    with pytest.raises(admission.AdmissionError, match=r"--dilate ([\d.]+) or more fits") as refused:
        admission.admit(parse_scenario(big), "local", machine=machine)
    k = float(re.search(r"--dilate ([\d.]+) or more fits", str(refused.value)).group(1))
    need, dilated = (admission.estimate(parse_scenario(big, overrides=[f"dilation={d}"])) for d in (1, k))
    assert dilated.cpu_cores - dilated.fixed_cores == pytest.approx((need.cpu_cores - need.fixed_cores) / k)
    assert not admission.admit(parse_scenario(big, overrides=[f"dilation={k}"]), "local", machine=machine)["problems"]
    assert admission.admit(parse_scenario(big, overrides=[f"dilation={k - dilation_rules.STEP}"]), "local", machine=machine,
                           force=True)["problems"]
