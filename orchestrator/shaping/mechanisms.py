"""The link-shaping interface: one `LinkShaper` per run, chosen once (`shaper_for`), that deploys every
link and changes it while the run goes on. Every mechanism shapes bandwidth and partitions alike (HTB
trees in the kernel, orchestrator/shaping/tc.py); they differ in where latency and loss live:

    NetemShaper      netem qdiscs in the kernel: a bucket per latency on each uplink
    DelayLineShaper  the delay line (delayline.py): each packet held at its receiver, by source
    TransportShaper  peerlab's node transport: frames held before the socket, per destination

A link's condition is one typed value, its shape (orchestrator/model/link_shape.py), and a shaper
has one call for it, `apply_all(shapes)`, at deploy and for every live fault: each shape is held
against the one last applied to its node, and only what changed is done. A node's first shape: its
trees (and the filters of the timeline's partitions); its rates: `Rate` on both ends of its link;
its partition: the cut, or the heal; its degradation: the mechanism's own. `restarted` tells a
restarted node what it must know. Everything a shaper does in a namespace is a typed operation
(ops.py), run there by the access to the namespaces its backend hands it (namespace_access.py).

What a shaper needs of a backend is declared here (`ShapingBackend`, with `LinkEnds`); every backend
of orchestrator/backends is one. May import: the rest of orchestrator/shaping, orchestrator.model
for types only; never orchestrator.backends, which imports shaping.
"""
from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Protocol

from orchestrator.shaping import delayline, ops
from orchestrator.shaping.modes import DELAYLINE, NETEM, TRANSPORT
from orchestrator.shaping.namespace_access import NamespaceAccess, Work

if TYPE_CHECKING:
    from orchestrator.model.link_shape import LinkShape
    from orchestrator.model.plan import RunPlan


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
    answers all of it): where each node's link ends, its address, and the access to the namespaces the
    typed operations run in (namespace_access.py: for the delay line too, the namespaces' files and
    the delay line of each machine)."""

    namespaces: NamespaceAccess

    def address(self, node_id: str) -> str: ...

    def link_ends(self, node_id: str) -> LinkEnds: ...

    def alive(self, node_id: str) -> bool: ...

    def check_stop(self) -> None: ...


class LinkShaper(abc.ABC):
    """HTB rates and partitions, and the mechanism's latency and loss (subclasses)."""

    mode: str
    latency: str  # where latency is applied, for the manifest and the report
    counts_lateness = False  # whether `stats()` tells how late it released packets (the delay line)

    def __init__(self, plan: RunPlan, backend: ShapingBackend, blocking: Blocking = asyncio.to_thread):
        """`plan`: the nodes, their contacts and the timeline's partitions; what their links get, the
        shapes say (a dilated run's latencies and rates are theirs, never the plan's)."""
        self.plan = plan
        self.backend = backend
        self.blocking = blocking
        self.applied: dict[str, LinkShape] = {}  # node -> the shape its link has now
        self.planned: dict[str, LinkShape] = {}  # node -> its first shape, without faults
        self._filters: dict[str, dict[int, frozenset[str]]] = {}  # node -> partition -> the peers it cuts off
        self._partitions = 0  # partitions prepared so far: the next one's number
        self._cut: dict[str, set[int]] = {}  # node -> the partitions cut on its link now

    @cached_property
    def address_of(self) -> dict[str, str]:
        return {n.id: self.backend.address(n.id) for n in self.plan.nodes}

    def _peers(self, node_id: str) -> list[str]:
        node = self.plan.node(node_id)
        return list(node.contacts or node.neighbours)

    # the one call ------------------------------------------------------------------------------------
    async def apply_all(self, shapes: Iterable[LinkShape]) -> list[str]:
        """Give each node's link its shape, doing only what differs from the shape it has (see the
        module docstring); what changed, a line per node. The shapes are taken at once (a fault that
        comes meanwhile is held against them), then the kernel's part, then the mechanism's."""
        changed: list[tuple[LinkShape, LinkShape]] = []  # (before, after)
        first: list[LinkShape] = []
        for shape in shapes:
            before = self.applied.get(shape.node)
            if before == shape:
                continue
            if before is None:
                first.append(shape)
                before = self.planned[shape.node] = shape.planned
            changed.append((before, shape))
            self.applied[shape.node] = shape
        work = self._kernel_work(first, changed)
        if work:
            await self.blocking(self.backend.namespaces.run_all, work, self.backend.check_stop)
        await self._latency(first, [(b, a) for b, a in changed if b.degradation != a.degradation])
        firsts = {s.node for s in first}
        return [_what(before, after, after.node in firsts) for before, after in changed]

    def _kernel_work(self, first: list[LinkShape], changed: list[tuple[LinkShape, LinkShape]]) -> Work:
        """The tc operations: trees for the first shapes (and the filters of every partition of the
        timeline), then, for each change, rates, the mechanism's degradation and cuts or the heal."""
        work: Work = {}
        for shape in first:
            ends = self.backend.link_ends(shape.node)
            buckets = egress_buckets(shape, self.address_of) if self.mode == NETEM else ()
            _add(work, ends.node_netns,
                 ops.Egress(ends.node_ifname, shape.up_bps, buckets, shape.jitter_ms, shape.loss))
            _add(work, ends.far_netns, ops.Download(ends.far_ifname, shape.down_bps))
        planned = [f.groups for f in self.plan.faults if f.groups] if first else []  # the partitions
        for number, groups in enumerate(planned):  # the timeline's partitions are numbered first
            side = {x: i for i, g in enumerate(groups) for x in g}
            self._prepare({s.node: frozenset(p for p in self._peers(s.node) if side[p] != side[s.node])
                           for s in first}, work, number)
        self._partitions = max(self._partitions, len(planned))
        cuts: list[tuple[str, int | None]] = []  # (node, partition), None: filters not prepared yet
        unforeseen: dict[str, frozenset[str]] = {}
        for before, after in changed:
            ends = self.backend.link_ends(after.node)
            if (before.up_bps, before.down_bps) != (after.up_bps, after.down_bps):
                _add(work, ends.node_netns, ops.Rate(ends.node_ifname, after.up_bps))
                _add(work, ends.far_netns, ops.Rate(ends.far_ifname, after.down_bps))
            if before.degradation != after.degradation:
                self._degrade_ops(after, ends, work)
            if before.cut_from != after.cut_from:
                unforeseen.update(self._recut(after.node, before.cut_from, after.cut_from, ends, work, cuts))
        if unforeseen:
            partition = self._prepare(unforeseen, work)
            cuts = [(node, partition if k is None else k) for node, k in cuts]
        for node, partition in cuts:
            ends = self.backend.link_ends(node)
            _add(work, ends.far_netns, ops.Cut(ends.far_ifname, partition))
            self._cut.setdefault(node, set()).add(partition)
        return work

    def _prepare(self, sources: dict[str, frozenset[str]], work: Work, partition: int | None = None) -> int:
        """A partition's filters, ahead of it (tc.prepare_cut): on each node's far end, for what comes
        from `sources[node]` (none: no filters there). The timeline's partitions have their numbers
        (their order in it); one it did not hold, the next number."""
        if partition is None:
            partition = self._partitions
            self._partitions += 1
        for node, peers in sources.items():
            if peers:
                ends = self.backend.link_ends(node)
                addresses = tuple(self.address_of[p] for p in self._peers(node) if p in peers)
                _add(work, ends.far_netns, ops.PrepareCut(ends.far_ifname, addresses, partition))
                self._filters.setdefault(node, {})[partition] = peers
        return partition

    def _recut(self, node: str, before: frozenset[str], after: frozenset[str], ends: LinkEnds, work: Work,
               cuts: list[tuple[str, int | None]]) -> dict[str, frozenset[str]]:
        """A node's partition changed: the heal (every cut of its link) if a peer is no longer cut off,
        then the cut of what comes from the peers newly cut off, through filters prepared for them
        (a partition's whose peers are these, else one's that cuts off no other); peers no filters
        are prepared for are returned, for a partition prepared now (tc.prepare_cut)."""
        cut = self._cut.setdefault(node, set())
        if not before <= after:
            _add(work, ends.far_netns, ops.Heal(ends.far_ifname))
            cut.clear()
            before = frozenset()
        need = after - before
        if not need:
            return {}
        filters = self._filters.get(node, {})
        usable = [k for k in sorted(filters) if k not in cut and need <= filters[k] <= after]
        chosen = next((k for k in usable if filters[k] == need), usable[0] if usable else None)
        cuts.append((node, chosen))
        return {} if chosen is not None else {node: need}

    def _degrade_ops(self, shape: LinkShape, ends: LinkEnds, work: Work) -> None:
        """A degradation changed: the mechanism's tc operations for it (netem's); none here."""

    async def _latency(self, first: list[LinkShape], degraded: list[tuple[LinkShape, LinkShape]]) -> None:
        """Latency outside the tc trees, where the mechanism keeps it: deployed for the first shapes,
        and each change of a degradation, (before, after)."""

    def node_delays(self, node_id: str) -> dict[str, Any]:
        """What a peerlab node's config carries for its own transport: nothing but in transport mode."""
        return {"delays_ms": {}, "jitter_ms": 0.0, "loss": 0.0}

    async def sent(self, node_id: str) -> int | None:
        """Bytes the node's link class has sent, headers included (what its rate counts); None from a
        backend that does not shape."""
        return await self.blocking(self._sent, node_id)

    def _sent(self, node_id: str) -> int | None:
        ends = self.backend.link_ends(node_id)
        done = self.backend.namespaces.run(ends.node_netns, [ops.Sent(ends.node_ifname)])
        return done[0].get("bytes") if done else None

    async def restarted(self, node_id: str) -> None:
        """A node's process started again: what it must be told about the links as applied (nothing
        where their degradations live outside the node)."""

    # accounting and the end ------------------------------------------------------------------------
    def report(self) -> tuple[dict[str, Any] | None, list[str]]:
        """The mechanism's own accounting for the manifest, and its warnings."""
        return None, []

    def close(self) -> None:
        """Stop what the mechanism started (the tc trees go with the namespaces)."""


def _add(work: Work, netns: str, op: ops.Op) -> None:
    work.setdefault(netns, []).append(op)


def _told(shape: LinkShape) -> dict[str, float]:
    """A degradation as a node's transport and the delay line are told it (zeros: none)."""
    return {"delay_ms": shape.added_delay_ms, "jitter_ms": shape.added_jitter_ms, "loss": shape.added_loss}


def _what(before: LinkShape, after: LinkShape, first: bool) -> str:
    """What an `apply_all` changed on a node's link, for the run's log."""
    if first:
        return f"{after.node}: shaped"
    done = []
    if (before.up_bps, before.down_bps) != (after.up_bps, after.down_bps):
        done.append(f"rate {after.up_bps}/{after.down_bps} bit/s")
    if before.degradation != after.degradation:
        done.append(f"added {after.added_delay_ms:g} ms, jitter {after.added_jitter_ms:g} ms, loss {after.added_loss:g}")
    if before.cut_from != after.cut_from:
        done.append(f"cut off from {len(after.cut_from)} peers" if after.cut_from else "healed")
    return f"{after.node}: {', '.join(done)}"


def egress_buckets(shape: LinkShape, address_of: dict[str, str]) -> ops.Buckets:
    """Netem's buckets on the node's uplink: (one-way ms, its peers' addresses, sorted) each, ascending."""
    return tuple((delay, tuple(sorted(address_of[p] for p in peers))) for delay, peers in shape.delays)


def ingress_delays(planned: dict[str, LinkShape], node_id: str, peers: list[str],
                   address_of: dict[str, str]) -> dict[str, float]:
    """The delay line's: the one-way latency (ms) of every packet the node receives, by its source
    address, as each peer's shape has it towards the node."""
    return {address_of[p]: planned[p].delay_to(node_id) for p in peers}


class NetemShaper(LinkShaper):
    mode = NETEM
    latency = "netem in the kernel"

    def _degrade_ops(self, shape: LinkShape, ends: LinkEnds, work: Work) -> None:
        """The node's buckets (what it sends) and a netem leaf on its far end (what it receives), as
        planned with the degradation on top (the netem queues sized for the planned rates)."""
        planned = self.planned[shape.node]
        _add(work, ends.node_netns, ops.DegradeEgress(ends.node_ifname, planned.up_bps,
                                                      tuple(d for d, _ in planned.delays), planned.jitter_ms,
                                                      planned.loss, shape.added_delay_ms, shape.added_loss,
                                                      shape.added_jitter_ms))
        _add(work, ends.far_netns, ops.DegradeIngress(ends.far_ifname, planned.down_bps, shape.added_delay_ms,
                                                      shape.added_loss, shape.added_jitter_ms))


class DelayLineShaper(LinkShaper):
    mode = DELAYLINE
    latency = "delay line: NFQUEUE at each node's ingress, held in user space by source"
    counts_lateness = True

    def __init__(self, plan: RunPlan, backend: ShapingBackend, blocking: Blocking = asyncio.to_thread):
        super().__init__(plan, backend, blocking)
        self.lines: delayline.DelayLines | None = None

    async def _latency(self, first: list[LinkShape], degraded: list[tuple[LinkShape, LinkShape]]) -> None:
        if first:
            await self.blocking(self._attach, first)
        for _, shape in degraded:
            await self.blocking(self._degrade, shape)

    def _attach(self, first: list[LinkShape]) -> None:
        """The delay line (started with the first shapes: the run's jitter and loss are every link's),
        attached to each node's ingress with the latencies of what it receives."""
        b, access = self.backend, self.backend.namespaces
        if self.lines is None:
            where = lambda node: b.link_ends(node).node_netns  # noqa: E731 - the node's namespace
            self.lines = delayline.DelayLines(
                self.plan.seed, [n.id for n in self.plan.nodes], lambda node: access.file_of(where(node)),
                (lambda node, seed: access.delay_line_of(where(node), seed)) if access.per_machine else None)
            self.lines.request(ops.LineLinks(self.address_of, first[0].jitter_ms, first[0].loss))
        for shape in first:
            b.check_stop()
            self.lines.attach(shape.node, b.link_ends(shape.node).node_ifname,
                              ingress_delays(self.planned, shape.node, self._peers(shape.node), self.address_of))

    def _degrade(self, shape: LinkShape) -> None:
        assert self.lines is not None
        self.lines.request(ops.LineDegrade(shape.node, **_told(shape)))

    def stats(self) -> dict[str, Any]:
        """The delay line's counters so far (cumulative)."""
        assert self.lines is not None
        return self.lines.request(ops.LineStats())

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
        """The node's planned link: the one-way latency towards each contact, jitter and loss."""
        shape = self.planned[node_id]
        return {"delays_ms": {p: shape.delay_to(p) for p in self._peers(node_id)}, "jitter_ms": shape.jitter_ms,
                "loss": shape.loss}

    async def _latency(self, first: list[LinkShape], degraded: list[tuple[LinkShape, LinkShape]]) -> None:
        """A degradation: the node's own transport (towards all its peers) and each running peer's
        (towards it)."""
        for _, shape in degraded:
            body = {"node": shape.node, **_told(shape)}
            targets = [p for p in [shape.node, *self._peers(shape.node)] if self.backend.alive(p)]
            results = await asyncio.gather(*(self.tell(p, body) for p in targets), return_exceptions=True)
            for result in results:
                if isinstance(result, Exception):  # a peer that died meanwhile has no links to degrade
                    self.warn(f"degrade of {shape.node}: {result}")

    async def restarted(self, node_id: str) -> None:
        """Degradations outlive processes: the node is told its own and its peers', as applied. The
        timeline goes on meanwhile: one that changes while the node is being told is told again, so
        that the last thing the node hears is the current state, whichever post lands last."""
        known = {node_id, *self._peers(node_id)}
        for other in [n for n, shape in self.applied.items() if n in known and any(shape.degradation)]:
            told = None
            while (now := _told(self.applied[other])) != told:
                await self.tell(node_id, {"node": other, **now})
                told = now


MECHANISMS: dict[str, type[LinkShaper]] = {NETEM: NetemShaper, DELAYLINE: DelayLineShaper, TRANSPORT: TransportShaper}


def shaper_for(mode: str, plan: RunPlan, backend: ShapingBackend, blocking: Blocking, tell: TellLinks,
               warn: Callable[[str], None]) -> LinkShaper:
    """The run's shaper for the mode `choose_mode` picked."""
    if mode == TRANSPORT:
        return TransportShaper(plan, backend, blocking, tell, warn)
    return MECHANISMS[mode](plan, backend, blocking)
