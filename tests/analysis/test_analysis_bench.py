"""The analysis benchmark's pieces: exact quantiles, the synthetic generator, and Spark and DuckDB
agreeing on the core metrics."""
import numpy as np
import pyarrow.dataset as ds
import pytest

from analysis import metrics, synthetic
from analysis.engine_bench import disagreements
from tests.support.cli import peerlab

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("values", [
    [5.0, 10.0, 20.0, 30.0, 40.0, 50.0],
    [7.0],
    [1.0, 1.0, 1.0, 2.0, 2.0, 9.0, 9.0, 9.0],
    list(np.random.default_rng(3).lognormal(4, 1, 50_000)),
    list(np.round(np.random.default_rng(4).exponential(20, 30_000))),  # many ties
])
@pytest.mark.parametrize("gather", [metrics._GATHER, 0], ids=["small column at the driver", "bands"])
def test_exact_quantiles_equal_numpy_interpolation(spark, values, gather, monkeypatch):
    monkeypatch.setattr(metrics, "_GATHER", gather)
    frame = spark.createDataFrame([(float(v), -float(v)) for v in values] + [(None, None)], "x double, y double")
    probs = (0.0, 0.01, 0.5, 0.9, 0.99, 1.0)
    row, got = metrics.summarize(frame, {"x": probs, "y": (0.5,)}, [metrics.F.count("*").alias("rows")])
    assert got["x"] == pytest.approx(list(np.percentile(values, [p * 100 for p in probs])), rel=1e-12)
    assert got["y"] == pytest.approx([-np.median(values)], rel=1e-12)  # two columns, the same two passes
    assert row["rows"] == len(values) + 1 and row["_n_x"] == len(values)


def test_synthetic_tables_have_the_event_schema_and_layout(tmp_path):
    shape = synthetic.Shape(nodes=10, topics=2, subscriptions=1)
    subs = synthetic.generate(tmp_path, 20_000, shape, seed=5)
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert 15_000 < table.num_rows < 25_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run=synthetic"]  # an events table's layout
    assert all(p.name.startswith("part-") for p in (tmp_path / "run=synthetic").iterdir())
    types = set(table.column("type").to_pylist())
    assert types == {"publish_message", "deliver_message", "duplicate_message", "send_rpc", "recv_rpc"}
    # a delivery is never earlier than its publish, and only subscribers deliver
    rows = table.select(["type", "node", "msg_id", "topic", "ts"]).to_pylist()
    pub = {r["msg_id"]: r for r in rows if r["type"] == "publish_message"}
    members = {(n, t) for n, t in subs}
    for r in rows:
        if r["type"] == "deliver_message":
            assert r["ts"] > pub[r["msg_id"]]["ts"] and (r["node"], r["topic"]) in members
            assert r["node"] != pub[r["msg_id"]]["node"]


def test_disagreements_name_the_figure():
    a = {"latency_ms": {"p50": 1.0, "p90": 2.0}, "messages": 3}
    assert disagreements(a, {"latency_ms": {"p50": 1.0, "p90": 2.5}, "messages": 3}) == ["latency_ms.p90: 2.0 != 2.5"]
    assert disagreements(a, {"latency_ms": {"p50": 1.0, "p90": None}, "messages": 3}) == ["latency_ms.p90: 2.0 != None"]
    assert not disagreements(a, {"latency_ms": {"p50": 1.0 + 1e-13, "p90": 2.0}, "messages": 3})


@pytest.mark.slow
def test_bench_analysis_engines_agree_and_print_the_ratio(tmp_path):
    out = peerlab("bench", "analysis", "--events", "300000", "--workdir", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "engines agree on every figure" in out.stderr
    last = out.stdout.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.split())
    assert set(fields) == {"spark_s", "duckdb_s", "ratio"}
    assert float(fields["ratio"]) == pytest.approx(float(fields["spark_s"]) / float(fields["duckdb_s"]), rel=0.05)
    assert not (tmp_path / "events").exists()  # the tables are removed unless --keep
