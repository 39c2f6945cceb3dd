"""Nodes that exit on their own: a node process that the fault timeline did not stop and that ends
before the drain is over. On every backend it is watched through `Backend.alive` from the moment the
nodes are up to the drain's end; each such exit is printed at once and recorded in the manifest
(`node_exits`: node, exit code, when, its last output, kept whole in the run directory under
`exits/<node>.txt`). Where a look at every node is a request through an API server (Kubernetes), the nodes
are looked at once, at the drain's end, rather than watched. A node that ends cleanly (exit code 0) once the drain's planned end has passed ended
with the run (a gossipsub-interop binary's script ends there), even when the orchestrator, on a
loaded machine, stops the nodes a little after it. The fidelity rule counts it as a run that does not measure the protocol
(orchestrator/fidelity/rule.py `exit_reasons`), the report lists it under Faults, and `peerlab run`
exits non-zero unless the scenario allows it (`nodes.exits: allow`).

May import: the backends' interface (as a type), the model's safe printing (bounded.shown) and the
fidelity rule's wording of an exit.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

from rich.markup import escape

from orchestrator.fidelity.rule import when
from orchestrator.model.bounded import shown

if TYPE_CHECKING:
    from orchestrator.backends import Backend

TAIL_LINES = 20     # of the node's output kept in exits/<node>.txt
SHOWN_LINES = 3     # of those, on the console and in the manifest
ALLOW, FAIL = "allow", "fail"


def last_lines(text: str, count: int = SHOWN_LINES, width: int = 300) -> list[str]:
    """The last `count` non-empty lines, safe to print (control characters escaped, each cut to `width`)."""
    return [shown(line.strip(), width) for line in text.splitlines() if line.strip()][-count:]


class NodeExits:
    """The watch. `down()`/`up()` tell it which nodes the timeline takes down and brings back (a kill,
    stop, restart or join), so that only the others' exits count; `now_ns` is experiment time."""

    def __init__(self, backend: Backend, run_dir: Path, manifest: dict[str, Any],
                 warn: Callable[[str], None], now_ns: Callable[[], int],
                 blocking: Callable[..., Awaitable[Any]]):
        self.backend = backend
        self.run_dir = run_dir
        self.records: list[dict[str, Any]] = manifest.setdefault("node_exits", [])
        self.warn = warn
        self.now_ns = now_ns
        self.blocking = blocking
        self.taken_down: set[str] = set()
        self.task: asyncio.Task | None = None
        self.nodes: list[str] = []
        self.t0_ns: Callable[[], int | None] = lambda: None
        self.end_s: float | None = None  # the drain's planned end, from T0
        self.interval_s = backend.exit_watch_s

    def down(self, node: str) -> None:
        self.taken_down.add(node)

    def up(self, node: str) -> None:
        self.taken_down.discard(node)

    def start(self, nodes: Iterable[str], t0_ns: Callable[[], int | None], end_s: float | None = None) -> None:
        """Watch `nodes` (those started at deploy); `t0_ns`: the run's T0 once it is fixed; `end_s`:
        the drain's planned end after T0."""
        self.nodes, self.t0_ns, self.end_s = list(nodes), t0_ns, end_s
        if self.interval_s is not None:
            self.task = asyncio.create_task(self._watch())

    async def stop(self, look: bool = True) -> None:
        """The watch ends; at the drain's end (`look`: the nodes still up), one last look first."""
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
            self.task = None
        if look and self.nodes:
            await self._look()
        self.nodes = []

    async def _watch(self) -> None:
        assert self.interval_s is not None
        while True:
            await self._look()
            await asyncio.sleep(self.interval_s)

    async def _look(self) -> None:
        watched = [n for n in self.nodes if n not in self.taken_down]
        alive = await self.blocking(self.backend.each, self.backend.alive, watched)
        for node, up in zip(watched, alive):
            if not up and node not in self.taken_down:  # (the timeline may have taken it down meanwhile)
                self.taken_down.add(node)  # down now: a planned restart brings it back (`up`)
                await self.blocking(self._record, node, self.t0_ns())

    def _record(self, node: str, t0_ns: int | None) -> None:
        at = None if t0_ns is None else round((self.now_ns() - t0_ns) / 1e9, 2)
        try:
            code = self.backend.wait_node(node, 2)  # it has exited: at once (0 is no time for an engine's API)
        except Exception:  # the engine or the API server could not say
            code = None
        if code == 0 and at is not None and self.end_s is not None and at >= self.end_s:
            return  # it ended with the run, cleanly: not on its own
        try:
            tail = self.backend.output_tail(node, TAIL_LINES)
        except Exception as err:  # its output is gone with it (a pod deleted)
            tail = f"(its output could not be read: {err})"
        kept = self.run_dir / "exits" / f"{node}.txt"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(tail + ("" if tail.endswith("\n") else "\n"))
        lines = last_lines(tail)
        self.records.append({"node": node, "code": code, "offset_s": at, "last_lines": lines,
                             "output": str(kept.relative_to(self.run_dir))})
        self.warn(escape(f"node {node} exited on its own {when(at)} (exit code {'unknown' if code is None else code}), "
                         f"before the drain's end: the run does not measure the protocol there. Its last output: "
                         f"{' | '.join(lines) or '(none)'} (all of it: {kept})"))


def summary(records: list[dict[str, Any]]) -> str:
    """One line naming every node that exited on its own, for the run's detail and the console."""
    named = ", ".join(f"{r['node']} (exit code {'unknown' if r['code'] is None else r['code']}, {when(r['offset_s'])})"
                      for r in records[:5])
    more = f" and {len(records) - 5} more" if len(records) > 5 else ""
    return f"{len(records)} node(s) exited on their own before the drain's end: {named}{more}"
