"""The fault timeline's actions on a live run (the `FaultExecutor` of orchestrator/faults/rules.py): node
processes killed, stopped and started through the backend; every action that changes links (a row of
orchestrator/model/fault_actions.py whose `changes` is LINKS) as the next shapes of the links, computed
by the run's link faults (next_shapes.py, the method of the row's name) and given whole to the run's
link shaper (orchestrator/shaping/mechanisms.py, `apply_all`), whatever its mechanism: a new
link action needs nothing here.

It is given the parts of the run it acts on, not the runner: the backend, the shaper, the nodes'
clients, the run's link faults (which know what is degraded), how the run restarts a node and how it
blocks off its loop.

May import: orchestrator.model; the parts' types only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from orchestrator.model.fault_actions import LINK_METHODS

if TYPE_CHECKING:
    from orchestrator.backends import Backend
    from orchestrator.control.contract_client import ContractClient
    from orchestrator.control.node_client import ControlClient
    from orchestrator.faults.next_shapes import LinkFaults
    from orchestrator.shaping import LinkShaper

# how the run does blocking work off its event loop (orchestrator/run/interrupts.py: a cancelled run's
# step finishes first, so teardown sees what it made)
Blocking = Callable[..., Awaitable[Any]]


@dataclass
class LiveFaults:
    backend: Backend
    shaper: LinkShaper
    clients: dict[str, ControlClient | ContractClient]
    links: LinkFaults
    restart: Callable[[str], Awaitable[None]]
    blocking: Blocking

    async def kill(self, node: str) -> None:  # waiting for the exit happens off the loop: restarts go on
        await self.blocking(self.backend.kill_node, node)

    async def stop(self, node: str) -> None:
        await self.clients[node].post("/stop", {"reason": "fault timeline"})
        if await self.blocking(self.backend.wait_node, node, 10) is None:
            await self.blocking(self.backend.kill_node, node)

    async def start(self, node: str) -> None:
        await self.restart(node)
        await self.shaper.restarted(node)

    def __getattr__(self, method: str) -> Callable[..., Awaitable[None]]:
        """A row's method that changes links: its next shapes from the run's link faults, applied whole."""
        if method not in LINK_METHODS:
            raise AttributeError(f"{type(self).__name__} has no {method!r}")
        next_shapes = getattr(self.links, method)

        async def apply(*args: Any) -> None:
            await self.shaper.apply_all(next_shapes(*args))
        return apply
