"""Clock offsets (orchestrator/run/clock.py) against clocks that really are off: on one machine every
node's true offset is 0, so the backends' runs cannot tell a right estimate from a wrong one; here
each node answers its own clock, shifted, over paths with their own delays."""
import asyncio
import time

from orchestrator.run import clock


class SkewedNode:
    """A node whose clock is `skew_ns` ahead of ours, reached in `out_s` and answering in `back_s`."""

    def __init__(self, skew_ns: int, out_s: float, back_s: float):
        self.skew_ns, self.out_s, self.back_s = skew_ns, out_s, back_s

    async def get(self, path: str, **_):
        assert path == "/clock"
        await asyncio.sleep(self.out_s)
        now = time.time_ns() + self.skew_ns
        await asyncio.sleep(self.back_s)
        return {"ns": now}


def test_offsets_are_found_within_half_the_round_trip():
    nodes = {"n0": SkewedNode(0, 0.002, 0.002), "n1": SkewedNode(5_000_000_000, 0.003, 0.003),
             "n2": SkewedNode(-2_500_000_000, 0.001, 0.001), "n3": SkewedNode(40_000_000, 0.010, 0.002)}
    measured = asyncio.run(clock.estimate(nodes, rounds=3, how="in a test"))
    assert measured["method"].startswith("NTP-style in a test")
    for node, fake in nodes.items():
        error = abs(measured["offsets_ns"][node] - fake.skew_ns)
        assert error <= measured["rtt_ns"][node] // 2 + 1_000_000, (node, error)
    # n3's paths are asymmetric (10 ms out, 2 ms back): off by about half the asymmetry, within rtt/2
    assert measured["max_error_ns"] == max(measured["rtt_ns"].values()) // 2


class VaryingNode(SkewedNode):
    """A node whose paths change from one round trip to the next: `paths` is (out_s, back_s) per round."""

    def __init__(self, skew_ns: int, paths: list[tuple[float, float]]):
        super().__init__(skew_ns, *paths[0])
        self.paths = list(paths)

    async def get(self, path: str, **kwargs):
        self.out_s, self.back_s = self.paths.pop(0)
        return await super().get(path, **kwargs)


def test_the_shortest_round_trip_is_the_one_kept():
    """Queued once on the way out (40 ms, then 30 ms) and once not: only the quick round trip gives the
    offset within 1 ms; the first or the last would be 15-20 ms off."""
    node = VaryingNode(7_000_000, [(0.040, 0.001), (0.001, 0.001), (0.030, 0.001)])
    stamps: list[int] = []
    offset, rtt = asyncio.run(clock.node_offset(node, rounds=3,
                                                now_ns=lambda: stamps.append(time.time_ns()) or stamps[-1]))
    # the round trips as they were, not as planned: a busy host may stretch the quick one
    assert rtt == min(b - a for a, b in zip(stamps[::2], stamps[1::2])), (rtt, stamps)
    assert abs(offset - 7_000_000) <= rtt // 2 + 1_000_000, offset
    assert node.paths == []
