"""A backend for testing the runner without root: every node a plain `python -m node` process on
127.0.0.1 (its own data port, its control API on a Unix socket), no namespaces, nothing shaped. The
shaping operations the runner asks for are recorded in `ops`, so a test sees what would have been
applied (trees at deploy, cuts and heals, rate changes), and latency falls to the nodes' transports
(transport mode, which its tests ask for), as on a kernel without sch_netem."""
from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from node import ids
from node.config import NodeConfig
from orchestrator.backends.base import Backend, RunContext, file_tail
from orchestrator.control.node_client import ControlClient
from orchestrator.shaping.mechanisms import LinkEnds
from orchestrator.shaping.namespace_access import NamespaceAccess


def _free_port_block(count: int) -> int:
    """A first port with `count` free ports after it (checked by binding each once), below the kernel's
    ephemeral range: a node restarted after a kill binds its port again, and a port of that range may
    meanwhile be any connection's source port on this machine (EADDRINUSE)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(50):
        base = random.randrange(10_000, low - count)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no block of free ports on 127.0.0.1")


class RecordedOps(NamespaceAccess):
    """No namespaces: each operation is recorded, (where, operation) in `ops` in the order asked, and
    answered as done."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, Any]] = []

    def run(self, where: str, todo: list[Any]) -> list[dict[str, Any]]:
        self.ops.extend((where, op) for op in todo)
        return [{"op": op.op, "recorded": True} for op in todo]


class LoopbackBackend(Backend):
    name = "loopback"
    uses_unix_control = True

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.base_port = _free_port_block(len(ctx.plan.nodes))
        self.procs: dict[str, subprocess.Popen] = {}
        self.namespaces = RecordedOps()
        self.ops = self.namespaces.ops
        for sub in ("configs", "events", "out"):
            (ctx.scratch / sub).mkdir(parents=True, exist_ok=True)

    def _path(self, kind: str, node_id: str) -> Path:
        suffix = {"configs": ".json", "events": ".jsonl", "out": ".out", "sock": ".sock"}[kind]
        return self.ctx.scratch / ("configs" if kind == "sock" else kind) / f"{node_id}{suffix}"

    def create_network(self) -> None:
        pass

    def address(self, node_id: str) -> str:
        return "127.0.0.1"

    def data_port(self, node_id: str) -> int:
        return self.base_port + ids.node_index(node_id)

    def link_ends(self, node_id: str) -> LinkEnds:
        return LinkEnds(f"host-{node_id}", "lo", f"switch-{node_id}", "lo")

    def probe_netem(self) -> tuple[bool, str]:
        return False, "loopback test backend: nothing is shaped"

    def control_endpoint(self, node_id: str) -> dict[str, str]:
        return {"unix": str(self._path("sock", node_id))}

    def event_log_path(self, node_id: str) -> str:
        return str(self._path("events", node_id))

    def start_node(self, node_id: str, config: NodeConfig) -> None:
        path = self._path("configs", node_id)
        path.write_text(config.model_dump_json())
        with open(self._path("out", node_id), "ab") as out:
            self.procs[node_id] = subprocess.Popen([sys.executable, "-m", "node", "--config", str(path)],
                                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill_node(self, node_id: str) -> None:
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def wait_node(self, node_id: str, timeout: float) -> int | None:
        proc = self.procs.get(node_id)
        if proc is None:
            return 0
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def alive(self, node_id: str) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def control(self, node_id: str) -> ControlClient:
        return ControlClient(node_id, self.ctx.token, unix=str(self._path("sock", node_id)))

    def event_log(self, node_id: str) -> Path:
        return self._path("events", node_id)

    def output_tail(self, node_id: str, lines: int = 10) -> str:
        return file_tail(self._path("out", node_id), lines)

    def teardown(self) -> None:
        for node_id in list(self.procs):
            self.kill_node(node_id)


def own_address(node_id: str) -> str:
    """An address of the node's own, as a unit test of shaping gives it (their text order is not the
    nodes': 10.0.0.10 sorts before 10.0.0.2)."""
    i = ids.node_index(node_id)
    return f"10.0.{i // 200}.{i % 200 + 1}"


class ShapingRecorder(LoopbackBackend):
    """The loopback backend as unit tests of shaping use it, without nodes: every node at an address
    of its own and running, the shaping operations recorded in `ops`."""

    def __init__(self, plan: Any, scratch: Path):
        super().__init__(RunContext("shaping-test", "000000", scratch, scratch, plan, "t" * 32))

    def address(self, node_id: str) -> str:
        return own_address(node_id)

    def alive(self, node_id: str) -> bool:
        return True
