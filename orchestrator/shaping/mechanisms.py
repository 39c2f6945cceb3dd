"""The link-shaping interface: one `LinkShaper` per run, chosen once (`shaper_for`), that deploys every
link and changes it while the run goes on. Every mechanism shapes bandwidth and partitions alike (HTB
trees in the kernel, orchestrator/shaping/tc.py); they differ in where latency and loss live:

    NetemShaper      netem qdiscs in the kernel: a bucket per latency on each uplink
    DelayLineShaper  the delay line (delayline.py): each packet held at its receiver, by source
    TransportShaper  peerlab's node transport: frames held before the socket, per destination

A live fault reaches a link through the same object that deployed it: `set_rate`, `cut`, `heal`,
`degrade`, `restore`, and `restarted` (what a restarted node must be told). Everything a shaper
needs from the plan comes as typed shapes from links.py; everything it does in a namespace goes
through the backend as typed operations (ops.py).

What a shaper needs of a backend is declared here (`ShapingBackend`, with `LinkEnds`); every backend
of orchestrator/backends is one. May import: the rest of orchestrator/shaping, orchestrator.model
for types only; never orchestrator.backends, which imports shaping.
"""
from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from orchestrator.shaping import delayline, ops
from orchestrator.shaping.links import DELAYLINE, NETEM, TRANSPORT, ingress_delays, node_shape, transport_delays

if TYPE_CHECKING:
    from orchestrator.model.plan import RunPlan

RESTORED = {"delay_ms": 0.0, "loss": 0.0}  # a link's degradation once restored

# how a node of this run is told its links' latency and loss (transport mode): POST /links to it
TellLinks = Callable[[str, dict[str, Any]], Awaitable[Any]]
# how blocking netlink or delay-line work is run off the event loop (the runner's: it lets a
# cancelled run's step finish first, so teardown sees what it made)
Blocking = Callable[..., Awaitable[Any]]


@dataclass
class LinkEnds:
    """Where shaping applies for one node: its own interface and the far end of its link."""

    node_netns: str
    node_ifname: str
    far_netns: str
    far_ifname: str


class ShapingBackend(Protocol):
    """What a shaper asks of the backend the nodes run on (orchestrator/backends/base.py's `Backend`
    answers all of it): where each node's link ends, its address, the typed operations run in a
    namespace, and, for the delay line, the namespaces' files and the delay line of each machine."""

    delayline_per_machine: bool

    def address(self, node_id: str) -> str: ...

    def link_ends(self, node_id: str) -> LinkEnds: ...

    def shape(self, where: str, todo: list[ops.Op]) -> list[dict[str, Any]]: ...

    def shape_all(self, work: dict[str, list[ops.Op]]) -> None: ...

    def alive(self, node_id: str) -> bool: ...

    def check_stop(self) -> None: ...

    def netns_path(self, node_id: str) -> str: ...

    def delay_line_of(self, node_id: str, seed: int) -> Any: ...


class LinkShaper(abc.ABC):
    """HTB rates and partitions, and the mechanism's latency and loss (subclasses)."""

    mode: str
    latency: str  # where latency is applied, for the manifest and the report
    counts_lateness = False  # whether `stats()` tells how late it released packets (the delay line)

    def __init__(self, plan: RunPlan, backend: ShapingBackend, blocking: Blocking = asyncio.to_thread):
        self.plan = plan
        self.backend = backend
        self.blocking = blocking
        self._partitions: list[tuple[list[list[str]], list[str]]] = []  # prepared: (sides, nodes it cuts)
        self._cut_nodes: set[str] = set()  # the nodes cut now

    @cached_property
    def address_of(self) -> dict[str, str]:
        return {n.id: self.backend.address(n.id) for n in self.plan.nodes}

    def _peers(self, node_id: str) -> list[str]:
        node = self.plan.node(node_id)
        return list(node.contacts or node.neighbours)

    # deploy --------------------------------------------------------------------------------------
    def deploy(self) -> None:
        """Every node's uplink tree, the download caps at the far ends with the filters of every
        partition of the timeline, then the mechanism's latency."""
        work: dict[str, list[ops.Op]] = {}
        for node in self.plan.nodes:
            ends = self.backend.link_ends(node.id)
            shape = node_shape(self.plan, node.id, self.address_of)
            work.setdefault(ends.node_netns, []).append(ops.Egress(ends.node_ifname, shape, self.mode == NETEM))
            work.setdefault(ends.far_netns, []).append(ops.Download(ends.far_ifname, node.bandwidth_down))
        for groups in (f.groups for f in self.plan.faults if f.action == "partition"):
            self._prepare_cut(groups, work)
        self.backend.shape_all(work)
        self._deploy_latency()

    def _deploy_latency(self) -> None:
        """Latency outside the tc trees, where the mechanism keeps it."""

    def node_delays(self, node_id: str) -> dict[str, Any]:
        """What a peerlab node's config carries for its own transport: nothing but in transport mode."""
        return {"delays_ms": {}, "jitter_ms": 0.0, "loss": 0.0}

    # bandwidth and partitions: the kernel's in every mode ------------------------------------------
    async def set_rate(self, node_id: str, up_bps: int, down_bps: int) -> None:
        await self.blocking(self._set_rate, node_id, up_bps, down_bps)

    def _set_rate(self, node_id: str, up_bps: int, down_bps: int) -> None:
        ends = self.backend.link_ends(node_id)
        work: dict[str, list[ops.Op]] = {}
        work.setdefault(ends.node_netns, []).append(ops.Rate(ends.node_ifname, up_bps))
        work.setdefault(ends.far_netns, []).append(ops.Rate(ends.far_ifname, down_bps))
        self.backend.shape_all(work)

    async def cut(self, groups: list[list[str]]) -> None:
        await self.blocking(self._cut, groups)

    def _prepare_cut(self, groups: list[list[str]], work: dict[str, list[ops.Op]]) -> None:
        """The filters of a partition into `groups` (ahead of it: tc.prepare_cut), numbered in the order
        they are prepared; the nodes it will cut (those with a peer across) are remembered."""
        side = {x: i for i, g in enumerate(groups) for x in g}
        partition = len(self._partitions)
        cut: list[str] = []
        for node in self.plan.nodes:
            others = tuple(self.address_of[p] for p in self._peers(node.id) if side[p] != side[node.id])
            if others:
                ends = self.backend.link_ends(node.id)
                work.setdefault(ends.far_netns, []).append(ops.PrepareCut(ends.far_ifname, others, partition))
                cut.append(node.id)
        self._partitions.append((groups, cut))

    def _cut(self, groups: list[list[str]]) -> None:
        """Partition: each node's far end drops what comes from the other sides, through the filters
        prepared at deploy (a partition the plan did not hold gets them now)."""
        work: dict[str, list[ops.Op]] = {}
        prepared = [g for g, _ in self._partitions]
        if groups not in prepared:
            self._prepare_cut(groups, work)
            prepared.append(groups)
        partition = prepared.index(groups)
        for node_id in self._partitions[partition][1]:
            ends = self.backend.link_ends(node_id)
            work.setdefault(ends.far_netns, []).append(ops.Cut(ends.far_ifname, partition))
            self._cut_nodes.add(node_id)
        self.backend.shape_all(work)

    async def heal(self) -> None:
        await self.blocking(self._heal)

    def _heal(self) -> None:
        work: dict[str, list[ops.Op]] = {}
        for node_id in sorted(self._cut_nodes):
            ends = self.backend.link_ends(node_id)
            work.setdefault(ends.far_netns, []).append(ops.Heal(ends.far_ifname))
        self.backend.shape_all(work)
        self._cut_nodes.clear()

    async def sent(self, node_id: str) -> int | None:
        """Bytes the node's link class has sent, headers included (what its rate counts); None from a
        backend that does not shape."""
        return await self.blocking(self._sent, node_id)

    def _sent(self, node_id: str) -> int | None:
        ends = self.backend.link_ends(node_id)
        done = self.backend.shape(ends.node_netns, [ops.Sent(ends.node_ifname)])
        return done[0].get("bytes") if done else None

    # latency and loss, live ----------------------------------------------------------------------
    @abc.abstractmethod
    async def degrade(self, node_id: str, delay_ms: float, loss: float) -> None:
        """Latency and loss added to every link of the node, both ways (zeros restore)."""

    async def restore(self, node_id: str) -> None:
        await self.degrade(node_id, **RESTORED)

    async def restarted(self, node_id: str, degraded: dict[str, dict[str, float]]) -> None:
        """A node's process started again: what it must be told about the live degradations (nothing
        where they live outside the node)."""

    # accounting and the end ------------------------------------------------------------------------
    def report(self) -> tuple[dict[str, Any] | None, list[str]]:
        """The mechanism's own accounting for the manifest, and its warnings."""
        return None, []

    def close(self) -> None:
        """Stop what the mechanism started (the tc trees go with the namespaces)."""


class NetemShaper(LinkShaper):
    mode = NETEM
    latency = "netem in the kernel"

    async def degrade(self, node_id: str, delay_ms: float, loss: float) -> None:
        await self.blocking(self._degrade, node_id, delay_ms, loss)

    def _degrade(self, node_id: str, delay_ms: float, loss: float) -> None:
        """The node's buckets (what it sends) and a netem leaf on its far end (what it receives)."""
        ends = self.backend.link_ends(node_id)
        shape = node_shape(self.plan, node_id, self.address_of)
        work: dict[str, list[ops.Op]] = {}
        work.setdefault(ends.node_netns, []).append(ops.DegradeEgress(ends.node_ifname, shape, delay_ms, loss))
        work.setdefault(ends.far_netns, []).append(
            ops.DegradeIngress(ends.far_ifname, self.plan.node(node_id).bandwidth_down, delay_ms, loss))
        self.backend.shape_all(work)


class DelayLineShaper(LinkShaper):
    mode = DELAYLINE
    latency = "delay line: NFQUEUE at each node's ingress, held in user space by source"
    counts_lateness = True

    def __init__(self, plan: RunPlan, backend: ShapingBackend, blocking: Blocking = asyncio.to_thread):
        super().__init__(plan, backend, blocking)
        self.lines: delayline.DelayLines | None = None

    def _deploy_latency(self) -> None:
        b = self.backend
        self.lines = delayline.DelayLines(self.plan.seed, [n.id for n in self.plan.nodes], b.netns_path,
                                          b.delay_line_of if b.delayline_per_machine else None)
        self.lines.request(op="links", ips=self.address_of, jitter_ms=self.plan.jitter_ms, loss=self.plan.loss)
        for node in self.plan.nodes:
            b.check_stop()
            self.lines.attach(node.id, b.link_ends(node.id).node_ifname,
                              ingress_delays(self.plan, node.id, self.address_of))

    async def degrade(self, node_id: str, delay_ms: float, loss: float) -> None:
        assert self.lines is not None
        await self.blocking(lambda: self.lines.request(op="degrade", node=node_id, delay_ms=delay_ms, loss=loss))

    def stats(self) -> dict[str, Any]:
        """The delay line's counters so far (cumulative)."""
        assert self.lines is not None
        return self.lines.request(op="stats")

    def report(self) -> tuple[dict[str, Any] | None, list[str]]:
        if self.lines is None:
            return None, []
        try:
            return delayline.summary(self.stats())
        except RuntimeError as err:
            return None, [str(err)]

    def close(self) -> None:
        if self.lines is not None:
            self.lines.close()


class TransportShaper(LinkShaper):
    """Latency in peerlab's node transport: each node holds its frames per destination; loss drops
    whole frames at the sender. Degradations are told to the running nodes (`tell`)."""

    mode = TRANSPORT
    latency = "per-destination delay in the node transport"

    def __init__(self, plan: RunPlan, backend: ShapingBackend, blocking: Blocking, tell: TellLinks,
                 warn: Callable[[str], None]):
        super().__init__(plan, backend, blocking)
        self.tell = tell
        self.warn = warn

    def node_delays(self, node_id: str) -> dict[str, Any]:
        return {"delays_ms": transport_delays(self.plan, node_id), "jitter_ms": self.plan.jitter_ms,
                "loss": self.plan.loss}

    async def degrade(self, node_id: str, delay_ms: float, loss: float) -> None:
        """The node's own transport (towards all its peers) and each running peer's (towards it)."""
        body = {"node": node_id, "delay_ms": delay_ms, "loss": loss}
        targets = [p for p in [node_id, *self._peers(node_id)] if self.backend.alive(p)]
        results = await asyncio.gather(*(self.tell(p, body) for p in targets), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):  # a peer that died meanwhile has no links to degrade
                self.warn(f"degrade of {node_id}: {result}")

    async def restarted(self, node_id: str, degraded: dict[str, dict[str, float]]) -> None:
        """Degradations outlive processes: the node is told its own and its peers'. The timeline goes
        on meanwhile: one that changes while the node is being told is told again, so that the last
        thing the node hears is the current state, whichever post lands last."""
        known = {node_id, *self._peers(node_id)}
        for other in [d for d in degraded if d in known]:
            told = None
            while (now := degraded.get(other, RESTORED)) != told:
                await self.tell(node_id, {"node": other, **now})
                told = now


MECHANISMS: dict[str, type[LinkShaper]] = {NETEM: NetemShaper, DELAYLINE: DelayLineShaper, TRANSPORT: TransportShaper}


def shaper_for(mode: str, plan: RunPlan, backend: ShapingBackend, blocking: Blocking, tell: TellLinks,
               warn: Callable[[str], None]) -> LinkShaper:
    """The run's shaper for the mode `choose_mode` picked."""
    if mode == TRANSPORT:
        return TransportShaper(plan, backend, blocking, tell, warn)
    return MECHANISMS[mode](plan, backend, blocking)
