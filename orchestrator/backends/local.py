"""The local backend: every node a real process in its own network namespace on this machine.

    pl<short>-sw   (switch namespace)   br0 ── v0, v1, ... vN-1   (bridge-side veth ends)
    pl<short>-n0   (node namespace)     eth0 10.X.0.2/16  <── veth ──> v0
    ...

The bridge lives in its own namespace, so nothing of a run touches the host's root namespace, and
every name carries the run's short id so that `peerlab clean` can find it after a crash.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import deque
from pathlib import Path

from pyroute2 import NetNS, netns

from node.config import NodeConfig
from orchestrator.backends.base import Backend, LinkEnds, RunContext
from orchestrator.cleanup import remove_run_objects
from orchestrator.control import ControlClient

DATA_PORT = 4001


class LocalBackend(Backend):
    name = "local"
    uses_unix_control = True

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.prefix = f"pl{ctx.short}"
        self.switch = f"{self.prefix}-sw"
        # one /16 per run, from the run id: concurrent runs are told apart in captures
        self.subnet = 100 + int(ctx.short, 16) % 100
        self.procs: dict[str, subprocess.Popen] = {}
        (ctx.scratch / "configs").mkdir(parents=True, exist_ok=True)
        (ctx.scratch / "events").mkdir(parents=True, exist_ok=True)
        (ctx.scratch / "out").mkdir(parents=True, exist_ok=True)

    def node_netns(self, node_id: str) -> str:
        return f"{self.prefix}-{node_id}"

    def address(self, node_id: str) -> str:
        host = int(node_id[1:]) + 2
        return f"10.{self.subnet}.{host >> 8}.{host & 0xFF}"

    def data_port(self, node_id: str) -> int:
        return DATA_PORT

    def link_ends(self, node_id: str) -> LinkEnds:
        return LinkEnds(self.node_netns(node_id), "eth0", self.switch, f"v{node_id[1:]}")

    def create_network(self) -> None:
        netns.create(self.switch)
        with NetNS(self.switch, flags=0) as sw:
            sw.link("set", index=sw.link_lookup(ifname="lo")[0], state="up")
            sw.link("add", ifname="br0", kind="bridge")
            bridge = sw.link_lookup(ifname="br0")[0]
            sw.link("set", index=bridge, state="up")
            for node in self.ctx.plan.nodes:
                name = self.node_netns(node.id)
                netns.create(name)
                port = f"v{node.index}"
                sw.link("add", ifname=port, kind="veth", peer={"ifname": "eth0", "net_ns_fd": name})
                idx = sw.link_lookup(ifname=port)[0]
                sw.link("set", index=idx, master=bridge, state="up")
                with NetNS(name, flags=0) as ns:
                    ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
                    eth0 = ns.link_lookup(ifname="eth0")[0]
                    ns.addr("add", index=eth0, address=self.address(node.id), prefixlen=16)
                    ns.link("set", index=eth0, state="up")

    def _paths(self, node_id: str) -> dict[str, Path]:
        s = self.ctx.scratch
        return {"config": s / "configs" / f"{node_id}.json", "events": s / "events" / f"{node_id}.jsonl",
                "out": s / "out" / f"{node_id}.out", "sock": s / f"{node_id}.sock"}

    def control_endpoint(self, node_id: str) -> dict[str, str]:
        return {"unix": str(self._paths(node_id)["sock"])}

    def event_log_path(self, node_id: str) -> str:
        return str(self._paths(node_id)["events"])

    def start_node(self, node_id: str, config: NodeConfig) -> None:
        paths = self._paths(node_id)
        paths["config"].write_text(config.model_dump_json())
        paths["sock"].unlink(missing_ok=True)
        name = self.node_netns(node_id)

        def enter_netns() -> None:
            netns.setns(name, flags=0, fork=False)

        with open(paths["out"], "ab") as out:
            self.procs[node_id] = subprocess.Popen(
                [sys.executable, "-m", "node", "--config", str(paths["config"])],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=enter_netns, start_new_session=True, close_fds=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def kill_node(self, node_id: str) -> None:
        proc = self.procs.get(node_id)
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

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
        return ControlClient(node_id, self.ctx.token, unix=str(self._paths(node_id)["sock"]))

    def event_log(self, node_id: str) -> Path:
        return self._paths(node_id)["events"]

    def output_tail(self, node_id: str, lines: int = 10) -> str:
        try:
            with open(self._paths(node_id)["out"], errors="replace") as f:
                return "".join(deque(f, lines)).rstrip()
        except FileNotFoundError:
            return "(no output)"

    def teardown(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait()
        remove_run_objects(self.ctx.short)
