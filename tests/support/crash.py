"""A node that crashes on its own during a run: its process SIGKILLed from outside the fault timeline,
as a segfault or the kernel's OOM killer would, on any backend whose nodes are host processes."""
from __future__ import annotations

import asyncio
import os
import signal

from orchestrator.run.runner import Runner

CRASHED, AFTER_T0_S = "n3", 1.0


class CrashOne(Runner):
    """Kills CRASHED's process AFTER_T0_S after T0 (the local backend's pid, or the docker backend's
    container's main process)."""

    async def _start_all(self) -> None:
        await super()._start_all()
        pids = getattr(self.backend, "pids", None) or getattr(self.backend, "node_pid")
        assert self.t0_ns is not None
        delay = (self.t0_ns - self.dilation.time_ns()) / 1e9 + AFTER_T0_S
        asyncio.get_running_loop().call_later(delay, os.kill, pids[CRASHED], signal.SIGKILL)


def assert_named(runner: Runner, allowed: bool) -> None:
    """The crash is recorded, named, in the verdict; the run failed unless the scenario allows exits; the
    timeline's own kills (the SMALL scenario's n7) are not counted."""
    manifest = runner.manifest
    (exit,) = manifest["node_exits"]
    assert exit["node"] == CRASHED and exit["code"] in (-9, 137), exit  # SIGKILL: -9, or 128 + 9 from an engine
    assert AFTER_T0_S <= exit["offset_s"] <= AFTER_T0_S + 3, exit
    assert manifest["status"] == ("completed" if allowed else "failed"), manifest["status"]
    assert manifest["fidelity"]["verdict"] == "unfaithful"
    assert any(f"node {CRASHED} exited on its own" in r for r in manifest["fidelity"]["reasons"])
