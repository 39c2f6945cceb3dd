"""Traffic measured outside the nodes: every node's kernel link counters, sampled every second while
the nodes run, into the run's `kernel_traffic.jsonl.gz` (one line per node per sample: ts, node,
sent/received bytes and packets, cumulative since the link was made). It exists for every node
implementation, and for peerlab's own nodes it can be held against what they logged
(analysis/kernel_traffic.py)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from node.dilation import REAL_TIME, Dilation

if TYPE_CHECKING:
    from orchestrator.backends import Backend

FILE = "kernel_traffic.jsonl"
INTERVAL_S = 1.0  # of experiment time: a dilated run's samples are stamped and spaced on its clock


class LinkSampler:
    def __init__(self, backend: Backend, path: Path, dilation: Dilation = REAL_TIME):
        self.backend = backend
        self.path = path
        self.dilation = dilation
        self.samples = 0
        self._task: asyncio.Task | None = None

    def sample(self) -> bool:
        """Append one sample (False where the backend cannot read link counters). Blocking netlink
        work: call it off the event loop."""
        counters = self.backend.link_counters()
        if counters is None:
            return False
        now = self.dilation.time_ns()
        with open(self.path, "a") as f:
            for node, c in sorted(counters.items()):
                f.write(json.dumps({"ts": now, "node": node, **c}, separators=(",", ":")) + "\n")
        self.samples += 1
        return True

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        interval = self.dilation.real(INTERVAL_S)
        while True:
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
            started = time.monotonic()
            await loop.run_in_executor(None, self.sample)

    async def start(self) -> bool:
        """Take the first sample and go on every second (False where the backend cannot read link
        counters)."""
        if not await asyncio.get_running_loop().run_in_executor(None, self.sample):
            return False
        self._task = asyncio.create_task(self._loop())
        return True

    async def stop(self) -> None:
        """One last sample, after the nodes stopped, so the totals are whole."""
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.sample)
        except OSError:  # the network is gone already (a failed deploy): keep what was sampled
            pass
