"""Traffic measured outside the nodes: every node's kernel link counters, sampled every second while
the nodes run, into the run's `kernel_traffic.jsonl.gz` (one line per node per sample: ts, node,
sent/received bytes and packets, cumulative since the link was made). It exists for every node
implementation, and for peerlab's own nodes it can be held against what they logged
(analysis/kernel_traffic.py). A backend whose sample is slow (Kubernetes: a round trip per pod) is sampled
less often, so that sampling takes at most a tenth of the time; one sample is always taken at T0 and
one after the nodes stopped, so the totals from T0 are whole at any interval."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from node.dilation import REAL_TIME, Dilation

if TYPE_CHECKING:
    from orchestrator.backends import Backend

FILE = "kernel_traffic.jsonl"
INTERVAL_S = 1.0  # of experiment time: a dilated run's samples are stamped and spaced on its clock
BUSY_SHARE = 0.1  # of the time between samples that taking one may last


class LinkSampler:
    def __init__(self, backend: Backend, path: Path, dilation: Dilation = REAL_TIME):
        self.backend = backend
        self.path = path
        self.dilation = dilation
        self.samples = 0
        self._took = 0.0
        self._stamped = time.monotonic()  # the instant the last sample is stamped at (the middle of its read)
        self._lock = threading.Lock()  # a mark and the periodic sample may overlap
        self._marks: list[asyncio.Task] = []
        self._manifest: dict[str, object] | None = None
        self.longest_interval_s = INTERVAL_S  # of experiment time: the interval the slowest sample asked for
        self._task: asyncio.Task | None = None

    def record(self) -> dict[str, object]:
        """The manifest's `kernel_traffic`: the file, the interval, where the counters are read."""
        return {"file": FILE + ".gz", "interval_s": INTERVAL_S, "where": self.backend.counters_where,
                "longest_interval_s": round(self.longest_interval_s, 2)}

    def sample(self) -> bool:
        """Append one sample (False where the backend cannot read link counters). Blocking netlink
        work: call it off the event loop."""
        began, began_ns = time.monotonic(), self.dilation.time_ns()
        counters = self.backend.link_counters()
        if counters is None:
            return False
        self._took = time.monotonic() - began
        self._stamped = began + self._took / 2
        now = (began_ns + self.dilation.time_ns()) // 2  # a slow read (a round trip per pod) is stamped at its middle
        with self._lock, open(self.path, "a") as f:
            for node, c in sorted(counters.items()):
                f.write(json.dumps({"ts": now, "node": node, **c}, separators=(",", ":")) + "\n")
            self.samples += 1
        return True

    def _interval(self) -> float:
        """Real seconds to the next sample: a second of experiment time, or ten times what the last
        sample took where that is longer."""
        interval = max(self.dilation.real(INTERVAL_S), self._took / BUSY_SHARE)
        self.longest_interval_s = max(self.longest_interval_s, self.dilation.experiment(interval))
        return interval

    async def _loop(self) -> None:
        """Each sample read no sooner than an interval after the last one's stamp, so stamps are never
        closer than that: counted from when the last read began instead, a read whose thread was
        starved (stamped late) was followed by one on time, under a second after it."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.0, self._interval() - (time.monotonic() - self._stamped)))
            await loop.run_in_executor(None, self.sample)

    def mark_at(self, when_ns: int) -> None:
        """One sample at experiment time `when_ns`, between the periodic ones (at T0: the totals from
        T0 start there, whatever the interval)."""
        async def mark() -> None:
            await asyncio.sleep(max(0.0, self.dilation.real((when_ns - self.dilation.time_ns()) / 1e9)))
            await asyncio.get_running_loop().run_in_executor(None, self.sample)
        if self._task is not None:
            self._marks.append(asyncio.create_task(mark()))

    async def start(self) -> bool:
        """Take the first sample and go on every second (False where the backend cannot read link
        counters)."""
        if not await asyncio.get_running_loop().run_in_executor(None, self.sample):
            return False
        self._task = asyncio.create_task(self._loop())
        return True

    async def before_nodes(self, manifest: dict[str, object]) -> None:
        """Sample from before the nodes start (their start-up is in the counters, T0's mark is where
        the run's totals begin), into the run's manifest's `kernel_traffic`."""
        self._manifest = manifest
        if await self.start():
            manifest["kernel_traffic"] = self.record()

    async def stop(self) -> None:
        """One last sample, after the nodes stopped, so the totals are whole."""
        if self._task is None:
            return
        for task in (self._task, *self._marks):
            task.cancel()
        await asyncio.gather(self._task, *self._marks, return_exceptions=True)
        self._task, self._marks = None, []
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.sample)
        except OSError:  # the network is gone already (a failed deploy): keep what was sampled
            pass
        if self._manifest is not None and "kernel_traffic" in self._manifest:
            self._manifest["kernel_traffic"] = self.record()  # with the longest interval
