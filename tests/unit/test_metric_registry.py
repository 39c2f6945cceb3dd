"""The metric registry: a metric is one registered function; None leaves its key out; a name is
registered once."""
import pytest

from analysis import registry


def test_registered_metrics_are_computed_in_order_and_none_is_left_out(monkeypatch):
    monkeypatch.setattr(registry, "METRICS", {})
    registry.metric("first")(lambda run: run["a"] + 1)
    registry.metric("absent")(lambda run: None)
    registry.metric("second")(lambda run: {"b": run["b"]})
    assert registry.compute_metrics({"a": 1, "b": 2}) == {"first": 2, "second": {"b": 2}}
    assert list(registry.compute_metrics({"a": 1, "b": 2})) == ["first", "second"]


def test_a_name_is_registered_once(monkeypatch):
    monkeypatch.setattr(registry, "METRICS", {})
    registry.metric("delivery_ratio")(lambda run: 1.0)
    with pytest.raises(ValueError, match="registered twice"):
        registry.metric("delivery_ratio")(lambda run: 0.5)


def test_the_common_metrics_are_registered():
    from analysis import faults, metrics, traffic, views  # noqa: F401 - they register themselves

    for name in ("messages", "delivery_ratio", "latency_ms", "coverage_latency_ms", "duplicates_per_node",
                 "bytes", "delivery_ratio_up", "per_topic", "bandwidth", "control"):
        assert name in registry.METRICS
    assert {"deliveries", "messages", "topics", "subscribers", "bandwidth"} <= set(registry.TABLES)
