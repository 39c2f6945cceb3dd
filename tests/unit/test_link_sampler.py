"""The link sampler's timing: every second where reading the counters is quick, less often where it
is slow (a Kubernetes run reads them with an exec per pod), and always a sample at T0."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from analysis.kernel_traffic import per_node_totals
from orchestrator.run.link_sampler import LinkSampler
from tests.support.cli import patient


class Links:
    """Counters that grow by 1000 bytes a second; each read takes `read_s`."""

    def __init__(self, read_s: float):
        self.read_s = read_s
        self.began = time.time()
        self.longest_read_s = 0.0  # as it took: longer than read_s where the machine is busy

    def link_counters(self):
        began = time.monotonic()
        time.sleep(self.read_s)
        self.longest_read_s = max(self.longest_read_s, time.monotonic() - began)
        sent = int((time.time() - self.began) * 1000)
        return {"n0": {"sent_bytes": sent, "received_bytes": 0, "sent_packets": 0, "received_packets": 0}}


def samples(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(links: Links, seconds: float, path, mark_after: float | None = None, before_stop: int = 0) -> LinkSampler:
    """Sample for `seconds`, and on until `before_stop` samples are taken (a starved machine reads
    slowly, which spaces the samples further apart), then stop (which takes one more)."""
    async def main():
        sampler = LinkSampler(links, path)
        assert await sampler.start()
        if mark_after is not None:
            sampler.mark_at(time.time_ns() + int(mark_after * 1e9))
        await asyncio.sleep(seconds)
        deadline = time.monotonic() + patient(10)
        while sampler.samples < before_stop and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await sampler.stop()
        return sampler
    return asyncio.run(main())


def gaps(path) -> list[float]:
    ts = [s["ts"] for s in samples(path)]
    return [b - a for a, b in zip(ts, ts[1:])]


# The bounds are on the spacing the sampler chooses (a lower bound: it never samples sooner) and on
# what it must have done by the end; a CPU-starved test (beside `make test`'s exclusive phase, at
# nice 19) only samples later, so the upper bounds are stretched as hang timeouts are (`patient`).

@pytest.mark.slow
def test_quick_reads_are_a_second_apart(tmp_path):
    path = tmp_path / "k.jsonl"
    sampler = run(Links(0.0), 2.4, path)
    assert sampler.samples >= 3  # at start, after 1 s (and 2 s, unless starved), and at stop
    assert all(g >= 0.95e9 for g in gaps(path)[:-1]), gaps(path)  # the last: the stop's, at any time
    assert gaps(path)[0] <= 1e9 + patient(0.3) * 1e9
    assert 1.0 <= sampler.longest_interval_s <= max(1.0, 10 * (patient(0.1) - 0.1))  # 1.0 unless starved


@pytest.mark.slow
def test_a_slow_read_spaces_the_samples_to_ten_times_its_length(tmp_path):
    path = tmp_path / "k.jsonl"
    links = Links(0.2)
    sampler = run(links, 3.0, path, before_stop=2)  # the start's and one periodic (starved: after 3 s)
    first = gaps(path)[0]
    # ten times what the read took: 0.2 s, more where the busy machine woke the reader late (a read of
    # 0.57 s beside make test's exclusive phase spaced them 5.7 s apart), never less
    ten_reads = 10 * links.longest_read_s
    assert first >= 1.95e9, gaps(path)
    assert first <= (ten_reads + patient(0.5)) * 1e9
    # the sampler times the read from its own side: the reader's return and the thread's wake-up
    # included (a loaded CI machine: 2.290 s against ten reads of 2.256)
    assert 1.95 <= sampler.longest_interval_s <= 10 * (links.longest_read_s + patient(0.02))
    assert sampler.samples >= 3  # at start, after about 2 s, and at stop


@pytest.mark.slow
def test_a_mark_takes_a_sample_at_its_time_between_the_periodic_ones(tmp_path):
    path = tmp_path / "k.jsonl"
    began = time.time_ns()
    run(Links(0.2), 1.5, path, mark_after=0.7)  # the periodic one after the start's: about 2.2 s
    ts = sorted(s["ts"] - began for s in samples(path))
    marks = [t for t in ts if 0.7e9 <= t <= 0.8e9 + patient(0.4) * 1e9]  # stamped at the middle of its read
    assert marks, ts
    # the totals from the mark on start at the mark
    assert per_node_totals(samples(path), began + int(0.7e9))["n0"]["span_ns"] > 0
