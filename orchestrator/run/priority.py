"""The orchestrator's scheduling priority while the fault timeline runs.

On a machine the nodes keep busy (100 nodes taking in a 96 KiB message on 2 cores: 40 runnable threads
per core), the orchestrator waited its turn like any of them, and a partition planned at T0+90 s took
1.4 s to cut the links, a kill beside it came 1.3 s late. From T0 to the drain's end its threads run at
nice -20 (the kernel's weight 88761 against a node thread's 1024: when both want a core it goes first;
it wants one rarely, so the nodes' share of the cores is what it was), so the timeline, the fidelity
probes it starts and its samples keep their times; the nodes keep their priority (the local backend's
fork server started them, and starts restarted ones, at its own: node/process/forkserver.py). Measured
with 70 busy processes on the 2 cores: the cut of 100 links took 0.73 s at nice -10 and 0.16 s at -20,
as on an idle machine. Without the privilege to raise it (not root), nothing changes. Restored when
the timeline ends.
"""
from __future__ import annotations

import os

TIMELINE_NICE = -20


def _threads() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]


class Raised:
    """`with Raised() as p:` every thread of this process at `nice` (threads started inside inherit
    it), each put back on exit; `p.nice` is what it ran at (None: not raised)."""

    def __init__(self, nice: int = TIMELINE_NICE):
        self.wanted = nice
        self.nice: int | None = None
        self.before: dict[int, int] = {}

    def __enter__(self) -> "Raised":
        for tid in _threads():
            try:
                self.before[tid] = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, self.wanted)
            except ProcessLookupError:  # the thread ended meanwhile
                continue
            except PermissionError:  # not allowed to: everything as it was
                self._restore()
                return self
        self.nice = self.wanted
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        default = self.before.get(os.getpid(), 0)
        for tid in _threads():
            try:
                os.setpriority(os.PRIO_PROCESS, tid, self.before.get(tid, default))
            except (ProcessLookupError, PermissionError):
                pass
