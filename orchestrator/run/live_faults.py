"""The fault timeline's actions on a live run (the `FaultExecutor` of orchestrator/faults.py): node
processes killed, stopped and started through the backend; partitions, rates, latency and loss
through the run's link shaper (orchestrator/shaping/mechanisms.py), whatever its mechanism."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.run.runner import Runner


class LiveFaults:
    def __init__(self, runner: Runner):
        assert runner.shaper is not None
        self.runner = runner
        self.backend = runner.backend
        self.shaper = runner.shaper

    async def kill(self, node: str) -> None:  # waiting for the exit happens off the loop: restarts go on
        await self.runner._blocking(self.backend.kill_node, node)

    async def stop(self, node: str) -> None:
        await self.runner.clients[node].post("/stop", {"reason": "fault timeline"})
        if await self.runner._blocking(self.backend.wait_node, node, 10) is None:
            await self.runner._blocking(self.backend.kill_node, node)

    async def start(self, node: str) -> None:
        await self.runner._restart(node)
        await self.shaper.restarted(node, self.runner.degraded)

    async def partition(self, groups: list[list[str]]) -> None:
        await self.shaper.cut(groups)

    async def heal(self) -> None:
        await self.shaper.heal()

    async def degrade(self, node: str, delay_ms: float, loss: float, bandwidth: int | None) -> None:
        self.runner.degraded[node] = {"delay_ms": delay_ms, "loss": loss}
        if bandwidth:
            await self.shaper.set_rate(node, bandwidth, bandwidth)
        await self.shaper.degrade(node, delay_ms, loss)

    async def restore(self, node: str) -> None:
        planned = self.shaper.plan.node(node)  # as shaping applies it (a dilated run's rates)
        self.runner.degraded.pop(node, None)
        await self.shaper.set_rate(node, planned.bandwidth_up, planned.bandwidth_down)
        await self.shaper.restore(node)
