"""The fault timeline's actions on a live run (the `FaultExecutor` of orchestrator/fault_rules.py): node
processes killed, stopped and started through the backend; partitions, rates, latency and loss as the
next shapes of the links (orchestrator/link_faults.py), given to the run's link shaper
(orchestrator/shaping/mechanisms.py, `apply_all`), whatever its mechanism.

It is given the parts of the run it acts on, not the runner: the backend, the shaper, the nodes'
clients, the run's link faults (which know what is degraded) and how the run restarts a node."""
from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Callable

from orchestrator.run.interrupts import blocking

if TYPE_CHECKING:
    from orchestrator.backends import Backend
    from orchestrator.control.contract_client import ContractClient
    from orchestrator.control.node_client import ControlClient
    from orchestrator.link_faults import LinkFaults
    from orchestrator.shaping import LinkShaper


class LiveFaults:
    def __init__(self, backend: Backend, shaper: LinkShaper, clients: dict[str, ControlClient | ContractClient],
                 links: LinkFaults, restart: Callable[[str], Awaitable[None]]):
        self.backend = backend
        self.shaper = shaper
        self.clients = clients
        self.links = links
        self.restart = restart

    async def kill(self, node: str) -> None:  # waiting for the exit happens off the loop: restarts go on
        await blocking(self.backend.kill_node, node)

    async def stop(self, node: str) -> None:
        await self.clients[node].post("/stop", {"reason": "fault timeline"})
        if await blocking(self.backend.wait_node, node, 10) is None:
            await blocking(self.backend.kill_node, node)

    async def start(self, node: str) -> None:
        await self.restart(node)
        await self.shaper.restarted(node)

    async def partition(self, groups: list[list[str]]) -> None:
        await self.shaper.apply_all(self.links.partition(groups))

    async def heal(self) -> None:
        await self.shaper.apply_all(self.links.heal())

    async def degrade(self, node: str, delay_ms: float, loss: float, bandwidth: int | None) -> None:
        await self.shaper.apply_all(self.links.degrade(node, delay_ms, loss, bandwidth))

    async def restore(self, node: str) -> None:
        await self.shaper.apply_all(self.links.restore(node))
