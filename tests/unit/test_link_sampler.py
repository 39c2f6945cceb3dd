"""The link sampler's timing: every second where reading the counters is quick, less often where it
is slow (a Kubernetes run reads them with an exec per pod), and always a sample at T0."""
from __future__ import annotations

import asyncio
import json
import time

from analysis.kernel_traffic import per_node_totals
from orchestrator.run.link_sampler import LinkSampler


class Links:
    """Counters that grow by 1000 bytes a second; each read takes `read_s`."""

    def __init__(self, read_s: float):
        self.read_s = read_s
        self.began = time.time()

    def link_counters(self):
        time.sleep(self.read_s)
        sent = int((time.time() - self.began) * 1000)
        return {"n0": {"sent_bytes": sent, "received_bytes": 0, "sent_packets": 0, "received_packets": 0}}


def samples(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(links: Links, seconds: float, path, mark_after: float | None = None) -> LinkSampler:
    async def main():
        sampler = LinkSampler(links, path)
        assert await sampler.start()
        if mark_after is not None:
            sampler.mark_at(time.time_ns() + int(mark_after * 1e9))
        await asyncio.sleep(seconds)
        await sampler.stop()
        return sampler
    return asyncio.run(main())


def test_quick_reads_are_a_second_apart(tmp_path):
    sampler = run(Links(0.0), 2.4, tmp_path / "k.jsonl")
    gaps = [b["ts"] - a["ts"] for a, b in zip(samples(tmp_path / "k.jsonl"), samples(tmp_path / "k.jsonl")[1:])]
    assert sampler.samples == 4  # at start, after 1 and 2 s, and at stop
    assert all(0.9e9 <= g <= 1.3e9 for g in gaps[:2]), gaps
    assert sampler.longest_interval_s == 1.0


def test_a_slow_read_spaces_the_samples_to_ten_times_its_length(tmp_path):
    sampler = run(Links(0.2), 3.0, tmp_path / "k.jsonl")
    ts = [s["ts"] for s in samples(tmp_path / "k.jsonl")]
    assert 1.8e9 <= ts[1] - ts[0] <= 2.6e9, ts  # 10 x 0.2 s, not 1 s
    assert 1.9 <= sampler.longest_interval_s <= 2.6
    assert sampler.samples == 3  # at start, after about 2 s, and at stop


def test_a_mark_takes_a_sample_at_its_time_between_the_periodic_ones(tmp_path):
    path = tmp_path / "k.jsonl"
    began = time.time_ns()
    run(Links(0.2), 1.5, path, mark_after=0.7)  # the next periodic one would be at about 2.2 s
    ts = sorted(s["ts"] - began for s in samples(path))
    assert len(ts) == 3, ts
    assert 0.7e9 <= ts[1] <= 1.2e9, ts  # the mark, stamped at the middle of its read
    # the totals from the mark on start at the mark
    assert per_node_totals(samples(path), began + int(0.7e9))["n0"]["span_ns"] < 1.5e9
