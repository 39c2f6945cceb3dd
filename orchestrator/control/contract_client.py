"""The runner's handle on a node that has no control API (an adapter's node: node/contract.py).

It answers the same calls as `ControlClient`, from what the contract gives: readiness and
connections from the node's own event log (`ready`, `connect`, `disconnect`, read as it grows), a
stop as SIGTERM through the backend. T0 is in the node's config, so `/start` only checks that the
runner's T0 is that one. Such nodes are calibrated before they start, by probes in their namespaces
(orchestrator/fidelity/netprobe.py), and their links are degraded from outside (the delay line,
orchestrator/shaping/delayline.py), never through the node.

What it needs of the backend is declared here (`ContractBackend`: the node's event log, a SIGTERM);
every backend of orchestrator/backends is one. May import: control.node_client; never
orchestrator.backends, which imports control.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from orchestrator.control.node_client import NodeError


class ContractBackend(Protocol):
    """What a contract node's client asks of the backend it runs on (orchestrator/backends/base.py's
    `Backend` answers it)."""

    def read_event_log(self, node_id: str, offset: int) -> bytes: ...

    def stop_node(self, node_id: str) -> None: ...


class ContractClient:
    def __init__(self, node_id: str, backend: ContractBackend, neighbours: list[str], t0_ns: int):
        self.node_id = node_id
        self.backend = backend
        self.neighbours = neighbours
        self.t0_ns = t0_ns
        self._offset = 0
        self._partial = b""
        self._ready = False
        self._connected: set[str] = set()

    def launched(self) -> None:
        """A new process of this node was started: readiness and connections start over."""
        self._read()
        self._ready = False
        self._connected.clear()

    def _read(self) -> None:
        data = self.backend.read_event_log(self.node_id, self._offset)
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line the node is still writing
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            kind = event.get("type")
            if kind == "start":
                self._ready = False
                self._connected.clear()
            elif kind == "ready":
                self._ready = True
            elif kind == "connect":
                self._connected.add(event["peer"])
            elif kind == "disconnect":
                self._connected.discard(event["peer"])

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        await asyncio.to_thread(self._read)  # on kubernetes an exec round trip: not on the event loop
        if path == "/healthz":
            if not self._ready:
                raise NodeError(self.node_id, "has not logged `ready` yet")
            return {"ok": True}
        if path == "/status":
            return {"node": self.node_id, "neighbours": self.neighbours, "connected": sorted(self._connected),
                    "state": "ready" if self._ready else "starting"}
        raise NodeError(self.node_id, f"GET {path}: a contract node has no control API")

    async def post(self, path: str, body: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        body = body or {}
        if path == "/start":
            if body.get("t0") != self.t0_ns:
                raise NodeError(self.node_id, f"its config has T0 {self.t0_ns}, the runner asked {body.get('t0')}")
            return {"armed": None}
        if path == "/stop":
            self.backend.stop_node(self.node_id)
            return {"stopping": True}
        raise NodeError(self.node_id, f"POST {path}: a contract node has no control API "
                                      "(its links are shaped from outside: --shaping netem or delayline)")

    async def close(self) -> None:
        pass
