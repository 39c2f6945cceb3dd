"""The local backend: every node a real process in its own network namespace on this machine.

    pl<short>-sw   (switch namespace)   br0 ── v0, v1, ... vN-1   (bridge-side veth ends)
    pl<short>-n0   (node namespace)     eth0 10.X.0.2/16  <── veth ──> v0
    ...

Node processes are forked by a per-run fork server (`node.process.forkserver`) that has the node's modules
loaded already; each child enters its namespace before it runs. The bridge lives in its own namespace, so nothing of a run touches the host's root namespace, and
every name carries the run's short id so that `peerlab clean` can find it after a crash.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pyroute2 import NetNS, netns
from pyroute2.netlink.rtnl import ndmsg

from node import ids
from node.adapters import INTEROP, get_adapter
from node.config import NodeConfig
from node.contract import ContractConfig
from node.process import privileges
from orchestrator.backends.base import Backend, RunContext, far_end_counters, file_tail
from orchestrator.control.node_client import ControlClient
from orchestrator.procfs import running as pid_running
from orchestrator.shaping import tcp_settings
from orchestrator.shaping.mechanisms import LinkEnds
from orchestrator.shaping.namespace_access import InProcess
from orchestrator.store.durable import private_dir, write_private

DATA_PORT = 4001
NUD_PERMANENT = ndmsg.states["permanent"]
ORPHAN_EXIT = -1  # the exit code of a node whose fork server died before it (its parent's to know)

class LocalBackend(Backend):
    name = "local"
    uses_unix_control = True
    runs_adapters = True
    has_delayline = True
    namespaces: InProcess  # Backend's own: the switch's handle and each node's, kept for the run

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.prefix = f"pl{ctx.short}"
        self.switch = f"{self.prefix}-sw"
        # one /16 per run, from the run id: concurrent runs are told apart in captures
        self.subnet = 100 + int(ctx.short, 16) % 100
        self.forkserver: subprocess.Popen | None = None
        self.pids: dict[str, int] = {}          # node -> pid of its current process
        self.exit_codes: dict[int, int] = {}    # pid -> exit code, as the fork server reports
        self._orphans: set[int] = set()         # nodes' pids whose fork server died before they did
        self._cond = threading.Condition()
        # nodes run as the run's own unprivileged user (node/process/privileges.py): they pass through the
        # scratch folder and those of their configs and logs (0o711: no listing), and reach nothing else of
        # it; each file of theirs is theirs (0o600), the socket folder theirs alone
        self.node_user = privileges.run_user(ctx.short)
        for folder in (ctx.scratch, private_dir(ctx.scratch / "configs"), ctx.scratch / "events"):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o711)
        private_dir(ctx.scratch / "out")
        private_dir(ctx.scratch / "sockets", owner=self.node_user[0])

    def node_netns(self, node_id: str) -> str:
        return f"{self.prefix}-{node_id}"

    def address(self, node_id: str) -> str:
        return ids.address(node_id, self.subnet)

    def mac(self, node_id: str) -> str:
        i = ids.node_index(node_id)
        return f"02:50:{self.subnet:02x}:{(i >> 16) & 0xFF:02x}:{(i >> 8) & 0xFF:02x}:{i & 0xFF:02x}"

    def data_port(self, node_id: str) -> int:
        return DATA_PORT

    def link_ends(self, node_id: str) -> LinkEnds:
        return LinkEnds(self.node_netns(node_id), "eth0", self.switch, f"v{node_id[1:]}")

    def create_network(self) -> None:
        sysctls = self.sysctls = tcp_settings.host_namespaces_sysctls(self.ctx.plan, self.ctx.short)
        netns.create(self.switch)
        with NetNS(self.switch, flags=0) as sw:
            sw.link("set", index=sw.link_lookup(ifname="lo")[0], state="up")
            sw.link("add", ifname="br0", kind="bridge")
            bridge = sw.link_lookup(ifname="br0")[0]
            sw.link("set", index=bridge, state="up")
            for node in self.ctx.plan.nodes:
                self.check_stop()
                name = self.node_netns(node.id)
                with tcp_settings.own_socket_tables():
                    netns.create(name)
                tcp_settings.write_in_netns(f"{netns.NETNS_RUN_DIR}/{name}", sysctls)
                port = f"v{node.index}"
                sw.link("add", ifname=port, kind="veth",
                        peer={"ifname": "eth0", "net_ns_fd": name, "address": self.mac(node.id)})
                idx = sw.link_lookup(ifname=port)[0]
                sw.link("set", index=idx, master=bridge, state="up")
                with NetNS(name, flags=0) as ns:
                    ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
                    eth0 = ns.link_lookup(ifname="eth0")[0]
                    ns.addr("add", index=eth0, address=self.address(node.id), prefixlen=16)
                    ns.link("set", index=eth0, state="up")
                    # Permanent neighbour entries for the peers it may contact: no ARP at start-up, and
                    # (since Linux 4.19) they do not count against the ARP table's gc_thresh3,
                    # which is shared by all namespaces and overflows at a few hundred nodes.
                    for peer in node.contacts or node.neighbours:
                        ns.neigh("add", dst=self.address(peer), lladdr=self.mac(peer), ifindex=eth0,
                                 state=NUD_PERMANENT)

    def link_counters(self) -> dict[str, dict[str, int]]:
        """One dump of the switch namespace: every node's port v<i>, whose receive side is what the node
        sent and whose transmit side is what it was given."""
        ports = {f"v{node.index}": node.id for node in self.ctx.plan.nodes}
        return self.namespaces.handle(self.switch).call(lambda sw: far_end_counters(sw, ports))

    def _paths(self, node_id: str) -> dict[str, Path]:
        s = self.ctx.scratch
        return {"config": s / "configs" / f"{node_id}.json", "events": s / "events" / f"{node_id}.jsonl",
                "out": s / "out" / f"{node_id}.out", "sock": s / "sockets" / f"{node_id}.sock"}

    def control_endpoint(self, node_id: str) -> dict[str, str]:
        return {"unix": str(self._paths(node_id)["sock"])}

    def event_log_path(self, node_id: str) -> str:
        return str(self._paths(node_id)["events"])

    def _forkserver_proc(self) -> subprocess.Popen:
        if self.forkserver is None or self.forkserver.poll() is not None:
            self.forkserver = subprocess.Popen(
                [sys.executable, "-m", "node.process.forkserver", str(self.ctx.scratch)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
            threading.Thread(target=self._read_forkserver, args=(self.forkserver,), daemon=True).start()
        return self.forkserver

    def _read_forkserver(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            msg = json.loads(line)
            with self._cond:
                if "spawned" in msg:
                    self.pids[msg["spawned"]] = msg["pid"]
                    self.exit_codes.pop(msg["pid"], None)
                elif "exit" in msg:
                    self.exit_codes[msg["exit"]] = msg["code"]
                self._cond.notify_all()
        with self._cond:  # the fork server is gone (killed): no one will report its children's exits
            self._orphans |= {pid for pid in self.pids.values() if pid not in self.exit_codes}
            self._cond.notify_all()

    def start_node(self, node_id: str, config: ContractConfig) -> None:
        paths = self._paths(node_id)
        uid, gid = self.node_user  # the config (the run's token) and the event log: the node's alone
        write_private(paths["config"], config.model_dump_json(), owner=uid)
        if not paths["events"].exists():
            write_private(paths["events"], "", owner=uid)
        paths["sock"].unlink(missing_ok=True)
        with self._cond:
            self.pids.pop(node_id, None)
        cmd = {"op": "spawn", "node": node_id, "netns": self.node_netns(node_id),
               "config": str(paths["config"]), "out": str(paths["out"])}
        cmd["user"] = [uid, gid]
        if not isinstance(config, NodeConfig):  # an adapter's node: its own command
            cmd["argv"] = get_adapter(config.implementation).argv(str(paths["config"]))
            # the gossipsub-interop shim gives its binary a host name and /etc/hosts first, as root
            cmd["drops_itself"] = config.implementation.startswith(INTEROP)
        proc = self._forkserver_proc()
        proc.stdin.write((json.dumps(cmd) + "\n").encode())
        proc.stdin.flush()
        with self._cond:
            if not self._cond.wait_for(lambda: node_id in self.pids, timeout=30):
                raise RuntimeError(f"the fork server did not start {node_id}")

    def _signal(self, node_id: str, sig: int) -> bool:
        """Send `sig` to the node's running process; False if it has none."""
        pid = self.pids.get(node_id)
        if pid is None or self._exited(node_id):
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        return True

    def stop_node(self, node_id: str) -> None:
        self._signal(node_id, signal.SIGTERM)

    def _exited(self, node_id: str) -> bool:
        pid = self.pids.get(node_id)
        if pid is None or pid in self.exit_codes:
            return True
        if pid in self._orphans and not pid_running(pid):  # (its exit code is lost with its parent)
            self.exit_codes[pid] = ORPHAN_EXIT
            return True
        return False

    def kill_node(self, node_id: str) -> None:
        if self._signal(node_id, signal.SIGKILL):
            self.wait_node(node_id, 10)

    def wait_node(self, node_id: str, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._exited(node_id):  # an orphan's end is seen by looking, not told: every 50 ms
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 0.05) if self._orphans else left)
            pid = self.pids.get(node_id)
            return 0 if pid is None else self.exit_codes[pid]

    def alive(self, node_id: str) -> bool:
        with self._cond:
            return not self._exited(node_id)

    def control(self, node_id: str) -> ControlClient:
        return ControlClient(node_id, self.ctx.token, unix=str(self._paths(node_id)["sock"]))

    def event_log(self, node_id: str) -> Path:
        return self._paths(node_id)["events"]

    def output_tail(self, node_id: str, lines: int = 10) -> str:
        return file_tail(self._paths(node_id)["out"], lines)

    def teardown(self) -> None:
        for node_id in list(self.pids):
            self.kill_node(node_id)
        if self.forkserver is not None:
            self.forkserver.stdin.close()  # EOF: the fork server exits
            try:
                self.forkserver.wait(10)
            except subprocess.TimeoutExpired:
                self.forkserver.kill()
                self.forkserver.wait()
        try:
            self.namespaces.close()
        finally:
            remove_run_objects(self.ctx.short)


# what a run leaves in the kernel: its namespaces and the processes in them (teardown and `peerlab clean`)
NETNS_DIR = Path("/run/netns")


def run_netns(short: str) -> list[str]:
    return sorted(n for n in netns.listnetns() if n.startswith(f"pl{short}-"))


def pids_in_netns(name: str) -> list[int]:
    """Processes whose network namespace is the named one."""
    try:
        target = os.stat(NETNS_DIR / name).st_ino
    except FileNotFoundError:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(entry / "ns" / "net").st_ino == target:
                pids.append(int(entry.name))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return pids


def remove_run_objects(short: str, scratch: str | None = None) -> dict[str, int]:
    """Kill every process in the run's namespaces, delete the namespaces (their veths go with them)
    and the scratch directory. Returns what was removed."""
    names = run_netns(short)
    killed = 0
    for name in names:
        for pid in pids_in_netns(name):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    while any(pids_in_netns(n) for n in names) and time.monotonic() < deadline:
        time.sleep(0.05)
    failed = []
    for name in names:
        for attempt in range(20):
            try:
                netns.remove(name)
            except OSError:
                pass
            if not (NETNS_DIR / name).exists():
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            failed.append(name)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    tcp_settings.release_host_namespaces(short)  # its namespaces gone: nothing of it uses peerlab_cubic
    if failed:
        raise OSError(f"could not remove network namespaces {', '.join(failed)}; try `peerlab clean` again")
    return {"processes": killed, "namespaces": len(names)}
