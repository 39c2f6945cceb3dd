"""The same small scenario emulated (real namespaces, tc, processes) and simulated (--backend sim),
both analysed by the same job: equal delivery ratio, latency percentiles within the tolerance the
docs/simulation.md states ("Agreement with emulation")."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import peerlab
from tests.support.scenarios import scenario_text

pytestmark = [pytest.mark.emulation, pytest.mark.spark, pytest.mark.slow, pytest.mark.exclusive]

SCENARIO = scenario_text("twin", 3, """\
nodes: {count: 16}
protocol: {name: gossipsub, params: {variant: v1.2}}
topology: {algorithm: random, degree: 6}
network: {latency: {model: constant, one_way: 40ms}, bandwidth_up: 50mbit, bandwidth_down: 50mbit}
topics: {count: 2, subscriptions: {model: interest, rate: 0.8}}
workload: {publishers: 6, rate: 6/s, message_size: 4KB, warmup: 3s, duration: 10s, drain: 3s}
calibration: {pairs: 4, throughput_nodes: 1}
""")
# Emulated nodes spend real CPU per hop (decode, validate, relay, log) that the simulation does not
# model: latency may exceed the simulated one by this much, and never fall below it by more than
# the timer granularity. The mean, not the median: deliveries here take one mesh hop (about 41 ms)
# or two (about 85 ms), about half each, so the median jumps from one to the other between runs of
# the same scenario (46 ms in two emulated runs, 84 ms in two others), while the mean follows the share.
EXTRA_MS = {"mean": 10.0, "p90": 15.0}
RELATIVE = 0.15


def test_emulation_and_simulation_agree(tmp_path: Path, spark):
    from analysis.job import compute

    scenario = tmp_path / "twin.yaml"
    scenario.write_text(SCENARIO + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    metrics = {}
    for backend in ("local", "sim"):
        result = peerlab("run", str(scenario), "--backend", backend, "--no-report", timeout=600)
        assert result.returncode == 0, result.stderr
        run_dir = Path(result.stdout.strip().splitlines()[-1])
        metrics[backend], _ = compute(spark, run_dir, write_tables=False)
    emu, sim = metrics["local"], metrics["sim"]
    print("latency ms, emulation:", {k: round(v, 1) for k, v in emu["latency_ms"].items() if k != "count"},
          "simulation:", {k: round(v, 1) for k, v in sim["latency_ms"].items() if k != "count"})
    assert emu["messages"] == sim["messages"] > 0
    assert emu["delivery_ratio"] == sim["delivery_ratio"] == 1.0
    for p, extra in EXTRA_MS.items():
        low, high = sim["latency_ms"][p] - 2.0, sim["latency_ms"][p] * (1 + RELATIVE) + extra
        assert low <= emu["latency_ms"][p] <= high, (p, emu["latency_ms"], sim["latency_ms"])
