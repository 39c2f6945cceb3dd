"""`peerlab bench soak`, short: the sampling lines, the partitions and churn it schedules, and the
accounting line at the end (nothing unaccounted, nothing left). The 30-minute figures are in docs/results.md."""
from __future__ import annotations

import re

import pytest

from orchestrator.model.scenario import parse_scenario
from orchestrator.tools.bench_soak import soak_scenario
from tests.support.cli import peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.spark, pytest.mark.slow]


def test_soak_scenario_schedules_partitions_and_churn():
    sc = parse_scenario(soak_scenario(1800, 20, 2.0, "file:///tmp/x"))
    parts = [f for f in sc.faults if f.action == "partition"]
    assert [f.at for f in parts] == [60, 360, 660, 960, 1260, 1560]
    assert all(len(f.groups[0]) == 10 and f.duration == 20 for f in parts)
    assert sc.churn is not None and sc.workload.duration == 1800
    short = parse_scenario(soak_scenario(40, 8, 2.0, "file:///tmp/x"))  # one cut, a quarter in, healed before the end
    assert [(f.at, f.duration) for f in short.faults if f.action == "partition"] == [(10, 10)]


@pytest.mark.waiting
def test_short_soak_prints_samples_and_accounts_for_every_publish(tmp_path):
    result = peerlab("bench", "soak", "--duration", "40s", "--every", "5s", "--nodes", "8",
                     "--store", f"file://{tmp_path}/runs", timeout=600)
    assert result.returncode == 0, result.stderr
    samples = [dict(kv.split("=") for kv in line.split()) for line in result.stdout.splitlines()
               if line.startswith("t_s=")]
    assert len(samples) >= 5
    assert any(int(s["namespaces"]) == 9 and int(s["processes"]) >= 7 for s in samples)  # 8 nodes + the switch
    last = dict(kv.split("=", 1) for kv in result.stdout.splitlines()[-1].split())
    assert last["unaccounted"] == "0" and int(last["published_planned"]) == 80
    assert last["namespaces_after"] == "0" and last["processes_after"] == "0"
    assert int(last["faults"]) >= 2  # the partition and its heal, with churn's kills and restarts
    assert re.match(r"-?\d+(\.\d+)?$", last["rss_growth_mib"])
