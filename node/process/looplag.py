"""How late the node's event loop wakes: a task sleeps TICK_S again and again and records each
overshoot (the time the loop spent on other work, or waiting for a CPU, past the timer's due time).
Every timer of the node (the transport's held frames, the publish schedule, the protocol's
heartbeats) is late by as much, so this is the node's own share of the timing error.

The lags are kept in order, numbered; `window(start)` gives the figures of those from number `start`
on (and their histogram over EDGES_MS, which the orchestrator adds up over the nodes), and the
number to ask from next time: the orchestrator reads it once per phase of the run
(GET /loop_lag on the control API), with no state on the node but the samples themselves."""
from __future__ import annotations

import asyncio
import time
from array import array
from bisect import bisect_left
from typing import Any

TICK_S = 0.05
# a tick of an idle loop costs it 45 us of CPU here (a sleep and a wake-up; 2 cores, quiet), 185 us
# on a busy machine: the machine's nodes together tick at most TICKS_PER_S times a second (0.5-2% of
# a core), so 30 nodes tick every 0.3 s and 200 every 2 s
TICKS_PER_S = 100
MAX_TICK_S = 2.0
EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # histogram: lag <= each edge, then above the last
KEEP = 72_000  # one hour of samples (288 KB); older ones are dropped, their numbers kept


class LoopLag:
    def __init__(self, tick_s: float = TICK_S, keep: int = KEEP, dilation: float = 1.0):
        """`dilation`: a dilated node's factor; lag is recorded in experiment ms (real ms / k), what it
        delays the protocol by. The tick itself stays in real time (a budget for the machine)."""
        self.tick_s = tick_s
        self.dilation = dilation
        self.keep = keep
        self.lags_ms = array("f")
        self.dropped = 0  # samples numbered before lags_ms[0]

    @staticmethod
    def tick_for(nodes: int) -> float:
        """The tick for a run of `nodes` nodes on one machine."""
        return min(MAX_TICK_S, max(TICK_S, nodes / TICKS_PER_S))

    @property
    def count(self) -> int:
        return self.dropped + len(self.lags_ms)

    def record(self, lag_ms: float) -> None:
        if len(self.lags_ms) >= self.keep:
            half = self.keep // 2
            del self.lags_ms[:half]
            self.dropped += half
        self.lags_ms.append(max(0.0, lag_ms))

    async def run(self) -> None:
        while True:
            due = time.monotonic() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.record((time.monotonic() - due) * 1000 / self.dilation)

    def window(self, start: int = 0) -> dict[str, Any]:
        """Samples from number `start` on: how many, p50, p99 and max lag (ms), and `next`. A `start`
        past the count is a restarted node's (its numbering began anew): from its first sample."""
        if start > self.count:
            start = 0
        lags = sorted(self.lags_ms[max(0, start - self.dropped):])
        hist = [0] * (len(EDGES_MS) + 1)
        for lag in lags:
            hist[bisect_left(EDGES_MS, lag)] += 1
        out: dict[str, Any] = {"tick_ms": self.tick_s * 1000, "samples": len(lags), "next": self.count, "hist": hist}
        if lags:
            out.update(p50_ms=round(lags[len(lags) // 2], 3), p99_ms=round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 3),
                       max_ms=round(lags[-1], 3))
        return out
