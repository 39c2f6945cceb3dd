"""The fault timeline's link actions as shapes: what each node's link is to become
(orchestrator/model/link_shape.py's `LinkShape`) after a degrade, a restore, a partition or a heal,
from the planned shapes and those of now. The live executor (orchestrator/faults/live_run.py) gives
the shapes returned to the run's shaper (`LinkShaper.apply_all`), the simulator
(orchestrator/sim/engine.py, `_apply`) to its discrete-event network; each does only what changed.

A run dilated by k degrades as it shapes (docs/dilation.md): a degrade's latency times k, its
bandwidth divided by k, its loss as is (the quantities' `kind` in orchestrator/model/fault_actions.py).
May import: orchestrator.model; nothing of run/, shaping/ or sim/."""
from __future__ import annotations

from dataclasses import replace

from orchestrator.model.fault_actions import BANDWIDTH, DELAY, JITTER, LOSS, Quantity
from orchestrator.model.link_shape import LinkShape, dilated_rate


class LinkFaults:
    """The links' shapes as planned and as they are now; each action returns the shapes it changed."""

    def __init__(self, planned: dict[str, LinkShape], k: float):
        self.planned = planned
        self.current = dict(planned)  # node -> its link's shape now
        self.k = k
        self.degraded: set[str] = set()  # nodes degraded until restored (a restore applies only to them)

    def _set(self, shapes: list[LinkShape]) -> list[LinkShape]:
        for shape in shapes:
            self.current[shape.node] = shape
        return shapes

    def degrade(self, node: str, delay_ms: float, loss: float, bandwidth: int | None) -> list[LinkShape]:
        """Latency and loss added to the node's link, both ways, in place of any before (a jitter stays);
        its rates (up and down alike) only if a bandwidth is given."""
        self.degraded.add(node)
        rate = self._dilated(BANDWIDTH, bandwidth or 0)
        rates = {"up_bps": rate, "down_bps": rate} if bandwidth else {}
        return self._set([replace(self.current[node], added_delay_ms=self._dilated(DELAY, delay_ms),
                                  added_loss=self._dilated(LOSS, loss), **rates)])

    def jitter(self, node: str, jitter_ms: float) -> list[LinkShape]:
        """Jitter added to the node's link, both ways, in place of any before (a degrade's delay, loss and
        rates stay)."""
        self.degraded.add(node)
        return self._set([replace(self.current[node], added_jitter_ms=self._dilated(JITTER, jitter_ms))])

    def _dilated(self, q: Quantity, value: float) -> float:
        """A degrade's quantity as the run applies it: by its kind, times k, as is or divided by k."""
        if q.kind == "latency":
            return value * self.k
        return dilated_rate(int(value), self.k) if q.kind == "rate" else value

    def restore(self, node: str) -> list[LinkShape]:
        """The node's link as planned, its partition (if one lasts) kept."""
        self.degraded.discard(node)
        return self._set([replace(self.planned[node], cut_from=self.current[node].cut_from)])

    def partition(self, groups: list[list[str]]) -> list[LinkShape]:
        """Every node cut off from its peers on another side (on top of a partition that lasts)."""
        side = {x: i for i, g in enumerate(groups) for x in g}
        shapes = []
        for node, now in self.current.items():
            across = frozenset(p for p in now.peers if side[p] != side[node])
            if not across <= now.cut_from:
                shapes.append(replace(now, cut_from=now.cut_from | across))
        return self._set(shapes)

    def heal(self) -> list[LinkShape]:
        """Every partition ends."""
        return self._set([replace(now, cut_from=frozenset()) for now in self.current.values() if now.cut_from])
