import pytest

from orchestrator.model.units import parse_bandwidth, parse_duration, parse_rate, parse_size


@pytest.mark.parametrize("text,seconds", [("100ms", 0.1), ("30s", 30), ("2m", 120), ("1h", 3600),
                                          ("250us", 250e-6), (1.5, 1.5), ("0.5", 0.5), ("-1s", -1)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,bps", [("50mbit", 50_000_000), ("1gbit", 10**9), ("800kbit", 800_000),
                                      ("50Mbit", 50_000_000), ("10mbit/s", 10_000_000), (1000, 1000)])
def test_bandwidths(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize("text,size", [("1KiB", 1024), ("2MiB", 2 * 1024**2), ("1kB", 1000), ("1500B", 1500),
                                       ("1500", 1500), (64, 64)])
def test_sizes(text, size):
    assert parse_size(text) == size


def test_rates():
    assert parse_rate("2/s") == 2
    assert parse_rate("120/m") == 2
    assert parse_rate(0.5) == 0.5


@pytest.mark.parametrize("parser,text,needle", [
    (parse_duration, "10 parsecs", "unknown time unit"),
    (parse_duration, "fast", "cannot read"),
    (parse_bandwidth, "5mbps", "ambiguous"),
    (parse_bandwidth, "5 furlongs", "unknown bandwidth unit"),
    (parse_size, "3 bananas", "unknown size unit"),
    (parse_rate, "2 per second", "cannot read"),
    (parse_duration, True, "duration"),
])
def test_unit_errors_say_what_to_write(parser, text, needle):
    with pytest.raises(ValueError, match=needle):
        parser(text)
