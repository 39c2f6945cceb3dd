"""The fault timeline's actions on a live run (the `FaultExecutor` of orchestrator/faults.py): node
processes killed, stopped and started through the backend, partitions and rates on the live tc trees
(orchestrator/shaping), latency and loss where the run's mode keeps them: netem qdiscs, the delay line,
or the nodes' transports (POST /links)."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from orchestrator import shaping
from orchestrator.run.contract_client import ContractClient

if TYPE_CHECKING:
    from orchestrator.backends import Backend
    from orchestrator.model.plan import RunPlan
    from orchestrator.run.runner import Runner


def far_ends(plan: RunPlan, backend: Backend) -> dict[str, list[tuple[str, str]]]:
    """The switch side of every node's link, by namespace (one handle per namespace)."""
    by_far: dict[str, list[tuple[str, str]]] = {}
    for node in plan.nodes:
        ends = backend.link_ends(node.id)
        by_far.setdefault(ends.far_netns, []).append((node.id, ends.far_ifname))
    return by_far


RESTORED = {"delay_ms": 0.0, "loss": 0.0}  # a link's degradation once restored


class LiveFaults:
    def __init__(self, runner: Runner, plan: RunPlan | None = None):
        """`plan`: as shaping applies it (a dilated run's latencies and rates); the runner's by default."""
        self.runner = runner
        self.backend = runner.backend
        self.plan = plan or runner.plan

    async def kill(self, node: str) -> None:  # waiting for the exit happens off the loop: restarts go on
        await self.runner._blocking(self.backend.kill_node, node)

    async def stop(self, node: str) -> None:
        await self.runner.clients[node].post("/stop", {"reason": "fault timeline"})
        if await self.runner._blocking(self.backend.wait_node, node, 10) is None:
            await self.runner._blocking(self.backend.kill_node, node)

    async def start(self, node: str) -> None:
        await self.runner._restart(node)
        await self._tell_degradations(node)

    async def partition(self, groups: list[list[str]]) -> None:
        await self.runner._blocking(self._cut, groups)

    async def heal(self) -> None:
        await self.runner._blocking(self.backend.shape_all, {
            far: [shaping.heal_op(ifname) for _, ifname in links] for far, links in far_ends(self.plan, self.backend).items()})

    async def degrade(self, node: str, delay_ms: float, loss: float, bandwidth: int | None) -> None:
        self.runner.degraded[node] = {"delay_ms": delay_ms, "loss": loss}
        if bandwidth:
            await self.runner._blocking(self._set_rate, node, bandwidth, bandwidth)
        await self._links(node, delay_ms, loss)

    async def restore(self, node: str) -> None:
        planned = self.plan.node(node)
        self.runner.degraded.pop(node, None)
        await self.runner._blocking(self._set_rate, node, planned.bandwidth_up, planned.bandwidth_down)
        await self._links(node, **RESTORED)

    async def _tell_degradations(self, node_id: str) -> None:
        """Degradations outlive processes: a node (re)started in transport mode is told its own and
        its peers' (in the other modes they live in the delay line or the kernel). The timeline goes
        on meanwhile: a degrade or restore of one of them while the node is being told is told
        again, so that the last thing the node hears is the current state, whichever post lands last."""
        if (self.runner.delayline or self.runner.shaping_mode == shaping.NETEM
                or isinstance(self.runner.clients[node_id], ContractClient)):
            return
        node = self.plan.node(node_id)
        known = {node_id, *(node.contacts or node.neighbours)}
        for degraded in [d for d in self.runner.degraded if d in known]:
            told = None
            while (now := self.runner.degraded.get(degraded, RESTORED)) != told:
                await self.runner.clients[node_id].post("/links", {"node": degraded, **now})
                told = now

    def _cut(self, groups: list[list[str]]) -> None:
        side = {x: i for i, g in enumerate(groups) for x in g}
        address_of = {n.id: self.backend.address(n.id) for n in self.plan.nodes}
        work: dict[str, list[dict[str, Any]]] = {}
        for far, links in far_ends(self.plan, self.backend).items():
            for node_id, ifname in links:
                node = self.plan.node(node_id)
                others = [address_of[p] for p in node.contacts or node.neighbours if side[p] != side[node_id]]
                work.setdefault(far, []).append(shaping.cut_op(ifname, others))
        self.backend.shape_all(work)

    def _set_rate(self, node_id: str, up_bps: int, down_bps: int) -> None:
        ends = self.backend.link_ends(node_id)
        work: dict[str, list[dict[str, Any]]] = {}
        work.setdefault(ends.node_netns, []).append(shaping.rate_op(ends.node_ifname, up_bps))
        work.setdefault(ends.far_netns, []).append(shaping.rate_op(ends.far_ifname, down_bps))
        self.backend.shape_all(work)

    def _netem_links(self, node_id: str, delay_ms: float, loss: float) -> None:
        """Netem mode: the node's buckets (what it sends) and a netem leaf on the switch side of its
        link (what it receives) get the degradation (orchestrator/shaping: degrade_egress, _ingress)."""
        ends = self.backend.link_ends(node_id)
        address_of = {n.id: self.backend.address(n.id) for n in self.plan.nodes}
        shape = shaping.node_shape(self.plan, node_id, address_of)
        work: dict[str, list[dict[str, Any]]] = {}
        work.setdefault(ends.node_netns, []).append(shaping.degrade_egress_op(ends.node_ifname, shape, delay_ms, loss))
        work.setdefault(ends.far_netns, []).append(
            shaping.degrade_ingress_op(ends.far_ifname, self.plan.node(node_id).bandwidth_down, delay_ms, loss))
        self.backend.shape_all(work)

    async def _links(self, node_id: str, delay_ms: float, loss: float) -> None:
        """Latency and loss on every link of the node, both ways: its own transport (towards all its
        peers) and each running peer's transport (towards it) are told; zeros restore."""
        if self.runner.delayline:  # every link's latency is in the delay line
            await self.runner._blocking(lambda: self.runner.delayline.request(
                op="degrade", node=node_id, delay_ms=delay_ms, loss=loss))
            return
        if self.runner.shaping_mode == shaping.NETEM:  # ... or in the kernel's netem qdiscs
            await self.runner._blocking(self._netem_links, node_id, delay_ms, loss)
            return
        node = self.plan.node(node_id)
        body = {"node": node_id, "delay_ms": delay_ms, "loss": loss}
        targets = [p for p in [node_id, *(node.contacts or node.neighbours)] if self.backend.alive(p)]
        results = await asyncio.gather(*(self.runner.clients[p].post("/links", body) for p in targets),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):  # a peer that died meanwhile has no links to degrade
                self.runner.warn(f"degrade of {node_id}: {result}")
