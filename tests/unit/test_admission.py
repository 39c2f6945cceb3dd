"""Admission (orchestrator/run/admission.py): a run that does not fit the machine is refused before
anything is planned or created, with the figures and the largest node count that fits; --force runs
it and the manifest says so; backends whose nodes do not run here are not checked."""
from __future__ import annotations

import json
import os
import re
import resource

import pytest

from orchestrator.model import dilation as dilation_rules
from orchestrator.model.scenario import parse_scenario
from orchestrator.run import admission
from orchestrator.run.admission import AdmissionError, Machine, admit, estimate, largest_fit, problems
from tests.support.cli import ROOT, peerlab

BUILD_MACHINE = Machine(memory_mib=22 * 1024, cpus=2, fds=1024 * 1024, disk_mib=60 * 1024)
QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()


def scenario(count: int, *extra: str):
    return parse_scenario(QUICKSTART, overrides=[f"nodes.count={count}", *extra])


def test_5000_local_nodes_are_refused_with_the_figures_and_the_largest_count_that_fits():
    with pytest.raises(AdmissionError) as err:
        admit(scenario(5000), "local", machine=BUILD_MACHINE)
    text = str(err.value)
    need = estimate(scenario(5000))
    assert "5000 nodes do not fit" in text
    assert f"memory: {need.memory_mib / 1024:.1f} GiB needed, 22.0 GiB available" in text
    assert f"CPU: {need.cpu_cores:.1f} cores' worth" in text and "--force" in text
    fit = largest_fit(need, BUILD_MACHINE)
    assert f"At most {fit} nodes" in text and f"--set nodes.count={fit}" in text
    assert not problems(estimate(scenario(fit)), BUILD_MACHINE)       # that many fit
    assert problems(estimate(scenario(fit + 1)), BUILD_MACHINE)       # one more does not


def test_small_runs_fit_and_the_record_says_what_was_estimated():
    record = admit(scenario(30), "local", machine=BUILD_MACHINE)
    assert record["checked"] and record["problems"] == [] and not record["forced"]
    table = admission.costs()["backends"]["local"]
    assert record["estimate"]["nodes"] == 30
    assert record["estimate"]["memory_mib"] == pytest.approx(
        table["fixed_mib"] + 30 * (table["node_mib"]["peerlab/floodsub"] + 4 * 1024 * table["held_s"] / 2**20), abs=0.1)


def test_force_runs_anyway_and_says_so():
    record = admit(scenario(5000), "docker", force=True, machine=BUILD_MACHINE)
    assert record["forced"] and len(record["problems"]) == 2


def test_each_kind_of_node_costs_what_was_measured_for_it_on_its_backend():
    for backend in ("local", "docker"):
        table = admission.costs()["backends"][backend]
        for name in ("go-libp2p", "rust-libp2p", "js-libp2p", "py-libp2p"):
            one = estimate(scenario(100, "protocol.name=gossipsub", f"protocol.implementation={name}"), backend)
            held = table["held_s"] * 4 * 1024 / 2**20  # quickstart: 1 KiB messages, 4/s
            assert one.memory_mib == pytest.approx(table["fixed_mib"] + 100 * (table["node_mib"][name] + held)
                                                   + one.probes * table["probe_mib"], abs=0.1)
    js = estimate(scenario(100, "protocol.name=gossipsub", "protocol.implementation=js-libp2p"))
    local_cpu = admission.costs()["backends"]["local"]
    share = admission.interest(scenario(100))  # quickstart: each node on a topic with probability 0.6
    assert share == 0.6
    assert js.cpu_cores == pytest.approx(local_cpu["fixed_cores"] + 100 * (local_cpu["node_cores"]["js-libp2p"] + 4 *
                                         share * local_cpu["node_cores_per_msg"]["js-libp2p"])
                                         + admission.traffic_cores(scenario(100), 100, local_cpu))
    # a mix: each group at its own cost
    mixed = estimate(scenario(10, "protocol.name=gossipsub", "protocol.implementation=js-libp2p",
                              "nodes.groups=[{name: go, count: 4, implementation: go-libp2p}]"))
    local = admission.costs()["backends"]["local"]["node_mib"]
    held = admission.costs()["backends"]["local"]["held_s"] * 4 * 1024 / 2**20
    assert mixed.memory_mib == pytest.approx(admission.costs()["backends"]["local"]["fixed_mib"] + 4 * (
        local["go-libp2p"] + held) + 6 * (local["js-libp2p"] + held)
        + mixed.probes * admission.costs()["backends"]["local"]["probe_mib"], abs=0.1)


def test_probes_beside_adapter_nodes_are_a_term_of_their_own():
    """An adapter's node has no probes of its own: the orchestrator's probe processes beside it
    (orchestrator/fidelity/netprobe.py) are counted by how many a run holds, which grows with its
    length, not as part of the node (rust-libp2p's 20-node run peaked 29.5% above an estimate that
    priced them into the node, docs/development.md)."""
    table = admission.costs()["backends"]["local"]
    assert 3 < table["probe_mib"] < 20
    on = lambda name, n, *more: scenario(n, "protocol.name=gossipsub", f"protocol.implementation={name}", *more)  # noqa: E731
    assert estimate(scenario(20)).probes == 0  # peerlab's nodes answer the probes themselves
    assert table["node_mib"]["go-libp2p"] > table["probe_mib"] > table["node_mib"]["rust-libp2p"]
    long, short = estimate(on("go-libp2p", 20, "workload.duration=120s")), estimate(on("go-libp2p", 20, "workload.duration=5s"))
    assert 19 < long.probes <= 20 and short.probes < long.probes - 3
    assert long.memory_mib == pytest.approx(table["fixed_mib"] + 20 * (table["node_mib"]["go-libp2p"] + table["held_s"]
                                            * 4 * 1024 / 2**20) + long.probes * table["probe_mib"], abs=0.1)
    # before T0 a clock reader in every namespace beside calibration's servers, and no node yet:
    # where a node costs less than a probe (rust-libp2p's), that is the peak
    brief = estimate(on("rust-libp2p", 60, "workload.duration=1s", "workload.warmup=0s", "workload.drain=0s"))
    assert brief.memory_mib == pytest.approx(table["fixed_mib"] + (60 + 10) * table["probe_mib"], abs=0.5)  # (probes to 0.1)


def test_each_message_per_second_costs_each_node_its_share_of_a_core():
    """A node's CPU is what it costs idle plus its share per message per second: the implementations
    scenario publishes one every 4 s, the bench measured at 4 per second."""
    table = admission.costs()["backends"]["local"]
    per_msg = table["node_cores_per_msg"]
    for kind in ("peerlab/gossipsub", "go-libp2p", "rust-libp2p", "js-libp2p", "py-libp2p"):
        assert per_msg[kind] >= 0
    assert sum(per_msg.values()) > 0
    go = lambda rate: scenario(50, "protocol.name=gossipsub", "protocol.implementation=go-libp2p",  # noqa: E731
                               f"workload.rate={rate}/s")
    fast, slow = estimate(go(8)), estimate(go(1))
    moved = admission.traffic_cores(go(8), 50, table) - admission.traffic_cores(go(1), 50, table)
    assert fast.cpu_cores - slow.cpu_cores == pytest.approx(50 * 7 * 0.6 * per_msg["go-libp2p"] + moved)


def test_large_messages_at_a_high_rate_cost_what_a_node_holds_of_them():
    small = estimate(scenario(100))
    large = estimate(scenario(100, "workload.message_size=1MiB", "workload.rate=20/s"))
    held_s = admission.costs()["backends"]["local"]["held_s"]
    assert held_s > 0
    assert large.memory_mib - small.memory_mib == pytest.approx(100 * held_s * (20 * 2**20 - 4 * 1024) / 2**20, abs=0.2)


def test_the_bytes_a_run_moves_cost_cpu_and_a_run_short_of_it_is_refused_with_the_dilation_that_fits():
    """gossipsub-large at 200 nodes (a 200 KB message every 4 s) was admitted by node count and ran
    unfaithful (docs/development.md); the bytes it moves need more cores than this machine has."""
    table = admission.costs()["backends"]["local"]
    assert table["cpu_s_per_mib_sent"] > 0 and table["copies_sent"] > 0
    large = (ROOT / "scenarios" / "gossipsub-large.yaml").read_text()
    at = lambda n, *more: parse_scenario(large, overrides=[f"nodes.count={n}", *more])  # noqa: E731
    traffic = admission.traffic_cores(at(200), 200, table)
    assert traffic == pytest.approx(12 * 200_000 / 48 * 200 * table["copies_sent"] / 2**20 * table["cpu_s_per_mib_sent"])
    assert admission.traffic_cores(at(100), 100, table) == pytest.approx(traffic / 2)
    need = estimate(at(200))
    assert need.cpu_cores > BUILD_MACHINE.cpus
    with pytest.raises(AdmissionError, match=r"--dilate ([\d.]+) or more fits") as refused:
        admit(at(200), "local", machine=BUILD_MACHINE)
    k = float(re.search(r"--dilate ([\d.]+) or more fits", str(refused.value)).group(1))
    dilated = admit(at(200, f"dilation={k}"), "local", machine=BUILD_MACHINE)
    assert not dilated["problems"]
    assert admit(at(200, f"dilation={k - dilation_rules.STEP}"), "local", machine=BUILD_MACHINE, force=True)["problems"]


def test_a_run_above_the_faithful_share_of_the_cores_is_admitted_with_a_warning():
    """Between FAITHFUL_CPU_SHARE of the cores and all of them: it runs, and says its timing will likely
    be unfaithful, and what --dilate keeps it under."""
    cores = lambda n: estimate(scenario(n)).cpu_cores  # noqa: E731
    n = next(n for n in range(10, 5000, 10) if cores(n) > admission.FAITHFUL_CPU_SHARE * BUILD_MACHINE.cpus)
    record = admit(scenario(n), "local", machine=BUILD_MACHINE)
    assert record["problems"] == [] and len(record["warnings"]) == 1
    assert "unfaithful" in record["warnings"][0] and "--dilate 1.5 or more fits" in record["warnings"][0]
    assert admit(scenario(n - 10), "local", machine=BUILD_MACHINE)["warnings"] == []


def test_implementations_that_cannot_be_dilated_are_pointed_to_fewer_nodes():
    js = lambda n: scenario(n, "protocol.name=gossipsub", "protocol.implementation=js-libp2p")  # noqa: E731
    n = next(n for n in range(10, 500, 5) if estimate(js(n)).cpu_cores > BUILD_MACHINE.cpus)
    found = problems(estimate(js(n)), BUILD_MACHINE)
    fits = int(re.search(r"its implementations cannot be dilated: --set nodes.count=(\d+) fits", found[0]).group(1))
    assert "--dilate" not in found[0] and estimate(js(fits)).cpu_cores <= BUILD_MACHINE.cpus < estimate(js(fits + 1)).cpu_cores
    warned = admission.warnings(estimate(js(fits)), BUILD_MACHINE)
    assert warned and "cannot be dilated: --set nodes.count=" in warned[0] and "--dilate" not in warned[0]


def test_every_implementation_and_protocol_has_a_cost_on_both_backends():
    from node.adapters import ADAPTERS
    from node.protocols import PROTOCOLS

    for backend in ("local", "docker"):
        for name in ADAPTERS:
            assert admission.node_mib(backend, name) > 0
            assert admission.node_cores(backend, name) + admission.node_cores_per_msg(backend, name) > 0
        for protocol in PROTOCOLS:  # measured, or the dearest measured
            assert admission.node_mib(backend, f"peerlab/{protocol}") > 0
            assert admission.node_cores(backend, f"peerlab/{protocol}") > 0


@pytest.mark.parametrize("backend", ["kubernetes", "sim"])
def test_backends_whose_nodes_do_not_run_here_are_not_checked(backend):
    assert admit(scenario(5000), backend, machine=BUILD_MACHINE)["checked"] is False


def _cli_run(count: int, *options: str):
    """`peerlab run` of `count` quickstart nodes into an S3 store nobody listens for (refused at once,
    connection refused): a run admitted here fails on its store before it creates anything, so this
    test can never start one, whatever the machine."""
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_REGION": "us-east-1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = peerlab("run", "scenarios/quickstart.yaml", "--set", f"nodes.count={count}",
                   "--set", "output.store=s3://nobody-listens/runs", "--no-report", *options, timeout=120, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the CPU the command took (a wall-clock time would count the other tests beside this one)
    return done, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


@pytest.mark.slow
def test_the_cli_refuses_before_planning_and_creates_nothing_and_force_lets_it_through():
    """`peerlab run` of 5000 local nodes (or more, on a machine they fit): refused (exit 3) with the
    figures, without planning (which takes about 33 s of CPU for 5000 nodes) and without a run directory;
    with --force the same command passes admission and stops at the store (exit 1)."""
    count = max(5000, largest_fit(estimate(scenario(5000)), Machine.here()) + 1)
    done, took = _cli_run(count)
    print(f"{count} nodes refused after {took:.1f} s of CPU")
    assert done.returncode == 3, done.stderr
    assert f"{count} nodes do not fit" in done.stderr and "At most" in done.stderr and "Traceback" not in done.stderr
    assert took < 10  # start-up and the estimate, no plan
    forced, _ = _cli_run(count, "--force")
    assert forced.returncode == 1 and "nobody-listens" in forced.stderr, forced.stderr
    assert "do not fit" not in forced.stderr and "Traceback" not in forced.stderr
    plan = peerlab("plan", "scenarios/quickstart.yaml", timeout=120)
    assert plan.returncode == 0 and "on this machine (local backend): needs" in plan.stdout


def _bench_run(tmp_path, name: str, busy_pct: float, sent_per_s: int):
    """A run directory as the bench reads it: the load phase's host figures, 4 nodes' link counters."""
    import gzip

    run = tmp_path / name
    run.mkdir()
    start, end = 10 * 10**9, 20 * 10**9
    (run / "manifest.json").write_text(json.dumps({
        "admission": {"machine": {"cpus": 2}},
        "fidelity": {"phases": {"load": {"from_ns": start, "to_ns": end,
                                         "host": {"cpu_busy_pct": {"p50": 1.0, "max": 99.0, "mean": busy_pct}}}}}}))
    with gzip.open(run / "kernel_traffic.jsonl.gz", "wt") as f:
        for second in range(0, 31):  # before and after the phase each node sends 40 times as much: not counted
            sent = sum(sent_per_s // 4 if 10 <= s < 20 else 10 * sent_per_s for s in range(second))
            for node in ("n0", "n1", "n2", "n3"):
                f.write(json.dumps({"ts": second * 10**9, "node": node, "sent_bytes": sent}) + "\n")
    return run


def test_the_bench_takes_cpu_per_mib_sent_and_copies_from_the_load_phase_of_two_runs(tmp_path):
    from orchestrator.tools import bench_admission as bench

    small = _bench_run(tmp_path, "small", busy_pct=10.0, sent_per_s=4 * 2**20)
    medium = _bench_run(tmp_path, "medium", busy_pct=60.0, sent_per_s=24 * 2**20)
    assert bench.load_rates(small) == pytest.approx((0.2, 4 * 2**20))
    got = bench.traffic_cpu(small, medium, n=4)
    assert got["cpu_s_per_mib_sent"] == pytest.approx(1.0 / 20, abs=1e-4)  # one more core for 20 MiB/s more
    published = bench.MEDIUM[1] * bench.MEDIUM[2] - bench.SMALL[1] * bench.SMALL[2]
    assert got["copies_sent"] == pytest.approx(20 * 2**20 / (published * 4), abs=0.01)
    with pytest.raises(RuntimeError, match="void"):
        bench.traffic_cpu(medium, small, n=4)


def test_the_bench_takes_an_adapters_node_without_the_probes_beside_it(tmp_path):
    """The bench's node cost for an adapter: the peak less the probe processes in its sample, or the
    sample as the drain ended (the probes stopped) where that is higher."""
    from orchestrator.tools import bench_admission as bench

    def run(peak: float, probes: float, drain_end: float | None):
        path = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
        path.mkdir()
        record = {"peak_mib": peak, "probes_at_peak": {"mib": probes, "processes": 10}}
        if drain_end is not None:
            record["drain_end_mib"] = drain_end
        (path / "manifest.json").write_text(json.dumps({"admission": record}))
        return bench._peak(path)

    assert run(300.0, 62.0, 230.0)["without_probes_mib"] == 238.0   # the peak held the probes
    assert run(300.0, 62.0, 260.0)["without_probes_mib"] == 260.0   # the nodes grew after the probes stopped
    assert run(300.0, 0.0, None)["without_probes_mib"] == 300.0     # peerlab's nodes: no probes
    assert run(300.0, 62.0, 230.0)["probes_at_peak"] == {"mib": 62.0, "processes": 10}


def test_a_run_needing_more_than_the_headroom_of_the_machine_is_refused_though_it_would_squeeze_in():
    """A run may take HEADROOM (80%) of the available memory, descriptors and disk: one needing 90% of
    what the machine has is refused naming the resource, though 100% would hold it; one needing 75% is
    admitted. The machine's figures are given, so the test holds on any machine."""
    run = scenario(30)
    need = estimate(run)
    roomy = dict(memory_mib=need.memory_mib * 100, cpus=64, fds=need.fds * 100, disk_mib=need.disk_mib * 100)
    assert admit(run, "local", machine=Machine(**roomy))["problems"] == []
    for field, word in (("memory_mib", "memory: "), ("fds", "file descriptors: "), ("disk_mib", "disk: ")):
        needed = getattr(need, field)
        at_90 = Machine(**{**roomy, field: (round(needed / 0.9) if field == "fds" else needed / 0.9)})
        with pytest.raises(AdmissionError) as refused:
            admit(run, "local", machine=at_90)
        text = str(refused.value)
        assert "30 nodes do not fit" in text and word in text and "--force" in text, text
        assert len(problems(need, at_90)) == 1, problems(need, at_90)  # that resource alone
        assert largest_fit(need, at_90) < 30
        at_75 = Machine(**{**roomy, field: (round(needed / 0.75) if field == "fds" else needed / 0.75)})
        assert admit(run, "local", machine=at_75)["problems"] == [], field
    memory = problems(need, Machine(**{**roomy, "memory_mib": need.memory_mib / 0.9}))[0]
    assert "a run may take 80%" in memory, memory


def test_a_node_costs_the_share_of_the_messages_its_topics_carry():
    """The bench measured every node on one topic; a node handles only its own topics' messages, so
    pulsarcast-everyone (3 of 23 zipf topics, publishers on their own topics) is estimated at its share,
    which its undilated run's busy time matched (0.61 cores estimated, 0.7 measured, faithful), not at
    the 1.57 cores that had peerlab dilate it three times."""
    everyone = parse_scenario((ROOT / "scenarios" / "pulsarcast-everyone.yaml").read_text())
    share = admission.interest(everyone)
    assert 0.15 < share < 0.4  # above 3/23: the popular topics have both the subscribers and the publishes
    assert admission.interest(everyone.model_copy(update={"workload": everyone.workload.model_copy(
        update={"publish_topics": "any"})})) < share  # published on any topic: the rare ones weigh as much
    assert admission.interest(scenario(30)) == 0.6
    assert admission.interest(scenario(30, "topics.count=1")) == 1.0
    assert admission.interest(scenario(30, "topics.subscriptions={model: round-robin}")) == pytest.approx(1 / 5)
    assert estimate(everyone).cpu_cores < FAITHFUL_SHARE_OF_TWO_CORES
    whole = estimate(scenario(30, "topics.subscriptions={model: interest, rate: 1.0}"))
    part = estimate(scenario(30, "topics.subscriptions={model: interest, rate: 0.5}"))
    fixed = admission.costs()["backends"]["local"]["fixed_cores"]
    idle = 30 * admission.costs()["backends"]["local"]["node_cores"]["peerlab/floodsub"]
    assert part.cpu_cores - fixed - idle == pytest.approx((whole.cpu_cores - fixed - idle) / 2)


FAITHFUL_SHARE_OF_TWO_CORES = admission.FAITHFUL_CPU_SHARE * 2
