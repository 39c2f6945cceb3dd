"""Every figure of metrics.json, on three stored runs of different protocols, is what the analysis
gave before it was reshaped for speed (one pass per node, fused passes, the Parquet events table):
tests/analysis/runs/<run>/expected-metrics.json were written by the analysis of commit 1d42f6f, and
changed since only where a definition changed on purpose: ci-smoke's `delivery_ratio_up` (0.99695
-> 1.0: n7, restarted, armed its schedule 104 ms before its first connection, and a message published
then is no longer expected of it: a node is up from its first connection) and its
`kernel_traffic.mean_mbit_per_node` (0.1438 -> 0.1538: over the samples' own span in the window, not
the window's length), both 2026-11-27; and churn-gossipsub's `protocol.dissemination` (new,
gossipsub-interop's per-message view, added 2026-11-28 as computed then).

- ci-smoke: floodsub, local backend, 8 nodes, kill/restart, a partition and its heal, clock offsets,
  resource samples and kernel link counters;
- churn-gossipsub: GossipSub v1.1 under churn in the simulator (24 nodes, 30 s): mesh, relaying,
  the GossipSub extra section, nodes down;
- topiary-topic-attack: Topiary with 18 topic-drop attackers in the simulator (measure_from,
  attack impact, the per-epoch extra section).
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from analysis.job import analyse

pytestmark = pytest.mark.spark

RUNS = Path(__file__).with_name("runs")


def differences(got: Any, expected: Any, path: str = "") -> list[str]:
    """Where two metrics.json differ: a key present in one only, or a value (floats to 1e-9)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in expected if k not in got]
        out += [f"{path}.{k}: not expected" for k in got if k not in expected]
        return out + [d for k in expected if k in got for d in differences(got[k], expected[k], f"{path}.{k}")]
    if isinstance(expected, list) and isinstance(got, list) and len(got) == len(expected):
        return [d for i, (g, e) in enumerate(zip(got, expected)) for d in differences(g, e, f"{path}[{i}]")]
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return [] if math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12) else [f"{path}: {got} != {expected}"]
    return [] if got == expected and type(got) is type(expected) else [f"{path}: {got!r} != {expected!r}"]


@pytest.mark.parametrize("name", sorted(p.name for p in RUNS.iterdir()))
def test_every_figure_is_what_it_was(tmp_path, spark, name):
    run = tmp_path / name
    shutil.copytree(RUNS / name, run, ignore=shutil.ignore_patterns("expected-metrics.json"))
    expected = json.loads((RUNS / name / "expected-metrics.json").read_text())
    got = json.loads(json.dumps(analyse(run, spark), default=str))
    assert differences(got, expected) == []
    # a second report reads the events table instead of converting the logs again, and says the same
    table = sorted((run / "analysis" / "tables" / "events").rglob("*.parquet"))
    written = [p.stat().st_mtime_ns for p in table]
    again = json.loads(json.dumps(analyse(run, spark), default=str))
    assert [p.stat().st_mtime_ns for p in table] == written
    assert differences(again, expected) == []


def test_the_comparison_sees_a_changed_figure():
    expected = {"a": 1.0, "b": {"c": [1, 2]}, "d": None}
    assert differences({"a": 1.0 + 1e-12, "b": {"c": [1, 2]}, "d": None}, expected) == []
    assert differences({"a": 1.01, "b": {"c": [1, 3]}, "e": 0}, expected) == [
        ".d: missing", ".e: not expected", ".a: 1.01 != 1.0", ".b.c[1]: 3 != 2"]
