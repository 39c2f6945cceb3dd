"""The kernel-traffic summary from link counter samples (no Spark: the samples are small)."""
from analysis.kernel_traffic import HEADER_BYTES, kernel_summary, per_node_totals


def _s(ts, node, sent, received, packets):
    return {"ts": ts, "node": node, "sent_bytes": sent, "received_bytes": received, "sent_packets": packets,
            "received_packets": packets}


SAMPLES = [_s(0, "n0", 0, 0, 0), _s(0, "n1", 100, 0, 1),
           _s(10**9, "n0", 1_000_066, 500, 10), _s(10**9, "n1", 200, 1_000_000, 2),
           _s(2 * 10**9, "n0", 2_000_000, 600, 20), _s(2 * 10**9, "n1", 300, 2_000_000, 3)]


def test_totals_are_counter_growth_per_node_within_the_window():
    assert per_node_totals(SAMPLES)["n0"]["sent_bytes"] == 2_000_000
    assert per_node_totals(SAMPLES)["n1"]["sent_bytes"] == 200  # the counter's start is not traffic
    assert per_node_totals(SAMPLES, 10**9)["n0"]["sent_bytes"] == 2_000_000 - 1_000_066


def test_summary_rates_and_ratios():
    out = kernel_summary(SAMPLES, (10**9, 2 * 10**9), {"n0": 1_900_000, "n1": 100})
    assert out["sent_bytes"] == 2_000_200 and out["received_bytes"] == 2_000_600
    assert out["sent_payload_bytes"] == 2_000_200 - HEADER_BYTES * 22
    assert round(out["mean_mbit_per_node"], 3) == round((999_934 + 100) * 8 / 1e6 / 1 / 2, 3)
    assert round(out["kernel_over_logged"], 4) == round(2_000_200 / 1_900_100, 4)
    assert kernel_summary([], None, {}) is None


def test_the_mean_upload_is_over_the_samples_own_span_when_they_are_seconds_apart():
    """A Kubernetes run samples every few seconds: 5 MB between samples 4 s apart inside a 10 s window
    is 10 Mbit/s, not 4."""
    sparse = [_s(0, "n0", 0, 0, 0), _s(3 * 10**9, "n0", 1_000_000, 0, 1), _s(7 * 10**9, "n0", 6_000_000, 0, 2)]
    out = kernel_summary(sparse, (2 * 10**9, 12 * 10**9), {})
    assert round(out["mean_mbit_per_node"], 6) == 10.0
    assert per_node_totals(sparse, 2 * 10**9)["n0"]["span_ns"] == 4 * 10**9
