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
    from analysis import catalogue  # noqa: F401 - it registers them

    for name in ("messages", "delivery_ratio", "latency_ms", "coverage_latency_ms", "duplicates_per_node",
                 "bytes", "delivery_ratio_up", "per_topic", "bandwidth", "control"):
        assert name in registry.METRICS
    assert {"deliveries", "messages", "topics", "subscribers", "bandwidth"} <= set(registry.TABLES)


def test_metrics_side_by_side_keep_registration_order_and_report_each_end(monkeypatch):
    import threading

    monkeypatch.setattr(registry, "METRICS", {})
    slow_started, fast_done = threading.Event(), threading.Event()

    def slow(run):
        slow_started.set()
        assert fast_done.wait(5), "the second metric did not run beside the first"
        return "slow"

    def fast(run):
        assert slow_started.wait(5)
        return "fast"
    registry.metric("slow")(slow)
    registry.metric("fast")(fast)
    ended = []

    def done(name, seconds):
        ended.append(name)
        if name == "fast":
            fast_done.set()
    assert list(registry.compute_metrics({}, done, workers=2).items()) == [("slow", "slow"), ("fast", "fast")]
    assert ended == ["fast", "slow"]


def test_a_shared_frame_is_made_once_when_asked_for_together():
    import threading
    import time

    from analysis.run_data import shared

    class Data:
        made = 0

        @shared
        def frame(self):
            Data.made += 1
            time.sleep(0.2)  # long enough for every thread below to ask while it is being made
            return object()
    data = Data()
    got = []
    threads = [threading.Thread(target=lambda: got.append(data.frame)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Data.made == 1 and len(got) == 4 and all(g is got[0] for g in got)
