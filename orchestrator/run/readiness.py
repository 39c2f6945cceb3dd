"""Waiting for a run's nodes: until each answers on its control API (or, an adapter's node, logs
`ready`) and until each is connected to its planned neighbours, with progress every 5 s and, on
timeout, an error naming the first node short and its last output. A part of the runner
(orchestrator/run/runner.py), mixed in."""
from __future__ import annotations

import asyncio
import time

from node import ids
from orchestrator.control.node_client import ControlClient
from orchestrator.record.run_record import RunError


class Readiness:
    """Uses the runner's backend, clients, present/absent nodes, step/warn and manifest."""

    def _fail_node(self, node_id: str, what: str) -> RunError:
        return RunError(f"node {node_id} {what}; its last output:\n{self.backend.output_tail(node_id)}")

    async def _wait_healthy(self, node_ids: list[str], timeout: float) -> None:
        pending = set(node_ids)
        deadline = time.monotonic() + timeout
        report_at = time.monotonic() + 5
        while pending:
            for node_id in sorted(pending):
                if not self.backend.alive(node_id):
                    raise self._fail_node(node_id, "exited during start-up")
            results = await asyncio.gather(*(self.clients[n].get("/healthz", timeout=2) for n in pending),
                                           return_exceptions=True)
            pending = {n for n, r in zip(list(pending), results) if isinstance(r, Exception)}
            if pending and time.monotonic() > deadline:
                first = ids.by_index(pending)[0]
                what = ("did not answer on its control API" if isinstance(self.clients[first], ControlClient)
                        else "did not log `ready` (the T0 in its config came first)")
                raise self._fail_node(first, f"{what} within {timeout:.0f}s ({len(pending)} nodes not up)")
            if pending and time.monotonic() > report_at:
                self.step(f"  {len(node_ids) - len(pending)}/{len(node_ids)} nodes answering")
                report_at += 5
            if pending:
                await asyncio.sleep(self.backend.poll_s)

    async def _wait_connected(self, timeout: float, fail: bool = True) -> None:
        """Until every present node is connected to all its present neighbours; after `timeout`, a
        RunError naming the first node short of them (or, `fail` False, a warning and on)."""
        deadline = time.monotonic() + timeout
        report_at = time.monotonic() + 5
        while True:
            statuses = await asyncio.gather(*(self.clients[n].get("/status") for n in self.present))
            missing = {s["node"]: sorted(set(s["neighbours"]) - set(s["connected"]) - self.absent)
                       for s in statuses}
            missing = {k: v for k, v in missing.items() if v}
            if not missing:
                return
            if time.monotonic() > report_at:
                self.step(f"  {len(statuses) - len(missing)}/{len(statuses)} nodes connected to all their neighbours")
                report_at += 5
            if time.monotonic() > deadline:
                node_id, peers = next(iter(sorted(missing.items(), key=lambda kv: ids.node_index(kv[0]))))
                if not fail:
                    self.warn(f"at T0, {len(missing)} nodes were short of some planned neighbours "
                              f"(first: {node_id}, missing {', '.join(peers[:5])}); the run goes on")
                    self.manifest["short_of_neighbours_at_t0"] = {k: v for k, v in sorted(missing.items())}
                    return
                raise self._fail_node(node_id, f"is not connected to {', '.join(peers[:5])} after {timeout:.0f}s "
                                               f"({len(missing)} nodes short of their neighbours)")
            await asyncio.sleep(max(0.25, self.backend.poll_s))
