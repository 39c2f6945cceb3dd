"""The Docker backend: every node a container of the node image, on a per-run bridge network.

    network pl<short>           (bridge, 10.S.0.0/16, the host side of each link on the host)
    pl<short>-n0-net            sandbox: holds n0's network namespace and address; root with
                                NET_ADMIN only, it runs the shaper (`python -m orchestrator.shaping`)
    pl<short>-n0                the node: non-root, no capabilities, in the sandbox's namespace
    volume pl<short>-events     every node's event log

The sandbox outlives node restarts (churn kills and starts only the node container), so the
namespace, its address and its tc tree stay, as a pod's do on Kubernetes. Upload shaping runs in the
sandbox through `docker exec`; the download cap and partitions go on the host side of the node's
veth (the far end of its link), which this process shapes directly, as root on the Docker host.
A node of an adapter (node/adapters) runs its adapter's image and command in the same place; the
delay line and the calibration probes reach a sandbox's namespace from the host through the
sandbox's process (/proc/<pid>/ns/net).
Everything carries the label peerlab.run=<short>: teardown and `peerlab clean` remove by label.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from node import ids
from node.adapters import PEERLAB, get_adapter
from node.config import NodeConfig
from node.contract import ContractConfig
from orchestrator import procfs
from orchestrator.backends.base import (
    SIDE_BY_SIDE,
    Backend,
    RunContext,
    far_end_counters,
    file_tail,
    side_by_side,
)
from orchestrator.builds import node_image as image
from orchestrator.control.node_client import ControlClient
from orchestrator.record import host_state
from orchestrator.shaping import ops, tcp_settings
from orchestrator.shaping.mechanisms import LinkEnds
from orchestrator.shaping.namespace_access import InContainers
from orchestrator.store.durable import private_dir, write_private

DATA_PORT = 4001
CONTROL_PORT = 7000
HOST = "host"  # link_ends' name for the Docker host's own namespace
EVENTS_DIR = "/var/lib/peerlab/events"
CONFIG_DIR = "/etc/peerlab"
LABEL = "peerlab.run"
NODE_UID = 10001  # the user every node image runs as (USER in node/Dockerfile and node/adapters/*/Dockerfile)
OWNER = "peerlab.owner"  # host/pid of the orchestrator that made it: clean leaves a live one's run alone


def docker_client():
    """A client for the local Docker engine, or a RuntimeError that says how to get one."""
    try:
        import docker
    except ImportError as err:  # pragma: no cover - a dependency of peerlab
        raise RuntimeError("the docker Python package is missing; run `make setup`") from err
    try:
        client = docker.from_env(timeout=120, max_pool_size=SIDE_BY_SIDE)  # a connection for each call at once
        client.ping()
    except Exception as err:
        raise RuntimeError(f"no Docker engine answers ({err.__class__.__name__}: {err}); install and start "
                           "it (Debian: apt-get install docker.io && dockerd &), or use --backend local") from None
    return client


def remove_docker_objects(short: str, client=None, volumes: bool = True) -> dict[str, int]:
    """Remove every container, network and (`volumes`) volume labelled with this run; counts of each
    (`peerlab clean` removes the event-log volume last, once its logs are stored)."""
    client = client or docker_client()
    selector = {"label": f"{LABEL}={short}"}
    containers = client.containers.list(all=True, filters=selector, ignore_removed=True)  # (gone meanwhile: gone)
    # nodes first: a sandbox cannot go while a container still uses its namespace
    for sandboxes in (False, True):
        side_by_side(lambda c: c.remove(force=True), [c for c in containers if c.name.endswith("-net") == sandboxes])
    networks = client.networks.list(filters=selector)
    for n in networks:
        _remove_network(n, [c.name for c in containers])
    gone = client.volumes.list(filters=selector) if volumes else []
    for v in gone:
        v.remove(force=True)
    return {"containers": len(containers), "networks": len(networks), "volumes": len(gone)}


def _remove_network(network, names: list[str], attempts: int = 5) -> None:
    """Remove a run's network. An endpoint still attached (a container the engine is still removing,
    or a stale one the engine kept for a container it removed: seen once in 30 runs of the suite) is
    disconnected by force, by the names of the run's containers, and the removal tried again."""
    from docker.errors import APIError, NotFound

    for attempt in range(attempts):
        try:
            network.remove()
            return
        except NotFound:
            return
        except APIError as err:
            if "active endpoints" not in str(err) or attempt == attempts - 1:
                raise
        network.reload()
        for container in [*(network.attrs.get("Containers") or {}), *names]:
            try:
                network.disconnect(container, force=True)
            except (APIError, NotFound):
                pass  # not attached, or gone
        time.sleep(0.5)


def event_volume_dirs(short: str) -> list[Path]:
    """Where the run's event-log volume keeps its files on this host (for `peerlab clean` to salvage)."""
    try:
        client = docker_client()
    except RuntimeError:
        return []
    return [Path(v.attrs["Mountpoint"]) for v in client.volumes.list(filters={"label": f"{LABEL}={short}"})
            if v.attrs.get("Mountpoint")]


def docker_leftovers() -> dict[str, str]:
    """Runs that have labelled Docker objects (none when no engine answers): short id -> the owner
    (`host/pid`) their labels name, "" for objects made before peerlab labelled owners."""
    try:
        client = docker_client()
    except RuntimeError:
        return {}
    # sparse: the list's own entries, their labels included; inspecting each (the default) fails on a
    # container another run removed meanwhile (a CI run's `clean` did, beside the docker tests)
    objects = [*client.containers.list(all=True, filters={"label": LABEL}, sparse=True),
               *client.networks.list(filters={"label": LABEL}), *client.volumes.list(filters={"label": LABEL})]
    found: dict[str, str] = {}
    for o in objects:
        labels = o.attrs.get("Labels") or o.attrs.get("Config", {}).get("Labels") or {}
        if labels.get(LABEL):
            found[labels[LABEL]] = found.get(labels[LABEL]) or labels.get(OWNER, "")
    return found


class DockerBackend(Backend):
    name = "docker"
    round_trips = True
    exit_watch_s = 2.0  # a look is a request to the engine per container
    runs_adapters = True
    adapters_in_images = True
    has_delayline = True
    counters_where = "each node's veth, at its host end"

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        self.client = docker_client()
        self.prefix = f"pl{ctx.short}"
        self.labels = {LABEL: ctx.short, OWNER: host_state.holder()}
        self.subnet = 200 + int(ctx.short, 16) % 50
        self.host_ifname: dict[str, str] = {}
        self.sandbox_pid: dict[str, int] = {}  # sandbox container -> its init, as this host sees it
        self.containers: dict[str, Any] = {}
        self.node_pid: dict[str, int] = {}  # of each node container's init, as this host sees it
        # shaping in a node's sandbox by an exec of the shaping entry point there; the bridge's side here
        self.namespaces = InContainers(self._exec_as_root, HOST, self.sandbox_pid.__getitem__, self.each)
        # progress on stderr: stdout's last line is the run directory
        say = lambda m: print(f"  {m}", file=sys.stderr, flush=True)  # noqa: E731
        self.image = image.build(self.client, say=say)
        self.images = {name: image.build(self.client, say=say, implementation=name)
                       for name in sorted({n.implementation for n in ctx.plan.nodes} - {PEERLAB})}
        # the configs (each holds the run's token), bind-mounted into the node containers: readable by
        # the nodes' user only, and not by anyone else on this host
        private_dir(ctx.scratch / "configs", NODE_UID)
        (ctx.scratch / "out").mkdir(parents=True, exist_ok=True)
        self.volume = None

    # names and addresses -----------------------------------------------------------------------
    def sandbox(self, node_id: str) -> str:
        return f"{self.prefix}-{node_id}-net"

    def address(self, node_id: str) -> str:
        return ids.address(node_id, self.subnet)

    def data_port(self, node_id: str) -> int:
        return DATA_PORT

    def link_ends(self, node_id: str) -> LinkEnds:
        return LinkEnds(self.sandbox(node_id), "eth0", HOST, self.host_ifname[node_id])


    def control_endpoint(self, node_id: str) -> dict[str, Any]:
        return {"host": self.address(node_id), "port": CONTROL_PORT}

    def event_log_path(self, node_id: str) -> str:
        return f"{EVENTS_DIR}/{node_id}.jsonl"

    # the network -------------------------------------------------------------------------------
    def create_network(self) -> None:
        import docker.types

        self.sysctls = tcp_settings.host_namespaces_sysctls(self.ctx.plan, self.ctx.short)  # the containers' namespaces are this kernel's
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(
            subnet=f"10.{self.subnet}.0.0/16", gateway=f"10.{self.subnet}.0.1")])
        self.client.networks.create(self.prefix, driver="bridge", ipam=ipam, labels=self.labels,
                                    options={"com.docker.network.bridge.name": f"{self.prefix}-br"})
        self.volume = self.client.volumes.create(f"{self.prefix}-events", labels=self.labels)
        peers = dict(self.each(self._start_sandbox, [node.id for node in self.ctx.plan.nodes]))
        with IPRoute() as ipr:
            for node_id, index in peers.items():
                self.host_ifname[node_id] = ipr.get_links(index)[0].get_attr("IFLA_IFNAME")

    def _start_sandbox(self, node_id: str) -> tuple[str, int]:
        """Create and start the node's sandbox; the host-side index of its veth."""
        self.check_stop()
        api = self.client.api
        net = api.create_networking_config({self.prefix: api.create_endpoint_config(
            ipv4_address=self.address(node_id))})
        c = api.create_container(
            self.image, name=self.sandbox(node_id), labels=self.labels, user="0",
            entrypoint=["python", "-m", "orchestrator.shaping", "--hold"], networking_config=net,
            host_config=api.create_host_config(network_mode=self.prefix, cap_drop=["ALL"],
                                               cap_add=["NET_ADMIN"], security_opt=["no-new-privileges"],
                                               init=True, sysctls=self.sysctls or None))
        api.start(c["Id"])
        self.sandbox_pid[self.sandbox(node_id)] = api.inspect_container(c["Id"])["State"]["Pid"]
        peer = self.namespaces.run(self.sandbox(node_id), [ops.PeerIndex("eth0")])
        return node_id, peer[0]["index"]

    def _exec_as_root(self, container: str, argv: list[str]) -> tuple[int, bytes]:
        result = self.client.containers.get(container).exec_run(argv, user="0")
        return result.exit_code, result.output

    # nodes -------------------------------------------------------------------------------------
    def _paths(self, node_id: str) -> dict[str, Path]:
        s = self.ctx.scratch
        return {"config": s / "configs" / f"{node_id}.json", "out": s / "out" / f"{node_id}.out"}

    def link_counters(self) -> dict[str, dict[str, int]]:
        """The host side of every node's veth: what it receives is what the node sent."""
        with IPRoute() as ipr:
            return far_end_counters(ipr, {ifname: node for node, ifname in self.host_ifname.items()})

    def start_node(self, node_id: str, config: ContractConfig) -> None:
        write_private(self._paths(node_id)["config"], config.model_dump_json(), NODE_UID)
        old = self.containers.pop(node_id, None)
        if old is not None:
            self._save_output(node_id, old)
            old.remove(force=True)
        config_path = f"{CONFIG_DIR}/{node_id}.json"
        if isinstance(config, NodeConfig):
            node_image, entrypoint, command = self.image, None, ["--config", config_path]
        else:  # an adapter's node: its image, its command
            argv = get_adapter(config.implementation).argv(config_path, image.IMAGE_TOOLS, image.IMAGE_ADAPTER)
            node_image, entrypoint, command = self.images[config.implementation], argv[:1], argv[1:]
        self.containers[node_id] = self.client.containers.run(
            node_image, command, entrypoint=entrypoint, name=f"{self.prefix}-{node_id}",
            detach=True, labels=self.labels, network_mode=f"container:{self.sandbox(node_id)}",
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            volumes={self.volume.name: {"bind": EVENTS_DIR, "mode": "rw"},
                     str(self.ctx.scratch / "configs"): {"bind": CONFIG_DIR, "mode": "ro"}})
        self.containers[node_id].reload()
        self.node_pid[node_id] = self.containers[node_id].attrs["State"]["Pid"]

    def host_pids(self) -> list[int]:
        """Every sandbox's and node container's processes, with the containerd shim that holds each."""
        pids = [*self.sandbox_pid.values(), *self.node_pid.values()]
        return [*pids, *(p for p in map(procfs.parent, pids) if p and procfs.command(p).startswith("containerd-shim"))]

    def _save_output(self, node_id: str, container: Any) -> None:
        """Keep what a node printed before its container is replaced or removed."""
        with open(self._paths(node_id)["out"], "ab") as f:
            f.write(container.logs())

    def stop_node(self, node_id: str) -> None:
        c = self.containers.get(node_id)
        if c is not None and self.alive(node_id):
            try:
                c.kill(signal="SIGTERM")
            except Exception:  # it exited meanwhile
                pass

    def kill_node(self, node_id: str) -> None:
        c = self.containers.get(node_id)
        if c is not None and self.alive(node_id):
            try:
                c.kill()
            except Exception:  # it exited meanwhile
                pass
            self.wait_node(node_id, 10)

    def wait_node(self, node_id: str, timeout: float) -> int | None:
        c = self.containers.get(node_id)
        if c is None:
            return 0
        try:
            return c.wait(timeout=timeout)["StatusCode"]
        except Exception:  # requests' ReadTimeout / ConnectionError: still running
            return None

    def alive(self, node_id: str) -> bool:
        c = self.containers.get(node_id)
        if c is None:
            return False
        c.reload()
        return c.status in ("running", "restarting")

    def control(self, node_id: str) -> ControlClient:
        return ControlClient(node_id, self.ctx.token, url=f"http://{self.address(node_id)}:{CONTROL_PORT}")

    def event_log(self, node_id: str) -> Path:
        """During the run: the log in the run's volume, as the node writes it (the runner follows an
        adapter node's readiness there); after teardown: the copy taken out of the volume."""
        if self.volume is not None and self.containers:
            return Path(self.volume.attrs["Mountpoint"]) / f"{node_id}.jsonl"
        return self.ctx.scratch / "events" / f"{node_id}.jsonl"

    def output_tail(self, node_id: str, lines: int = 10) -> str:
        c = self.containers.get(node_id)
        if c is not None:
            return c.logs(tail=lines).decode(errors="replace").rstrip() or "(no output)"
        return file_tail(self._paths(node_id)["out"], lines)

    def teardown(self) -> None:
        """Stop the nodes, copy the event logs out of the volume, then remove every object of the run."""
        self.each(self.kill_node, list(self.containers))
        self.each(lambda item: self._save_output(*item), self.containers.items())
        if self.volume is not None:
            events = self.ctx.scratch / "events"
            events.mkdir(parents=True, exist_ok=True)
            for log in Path(self.volume.attrs["Mountpoint"]).glob("*.jsonl"):
                shutil.copyfile(log, events / log.name)
        self.containers.clear()
        remove_docker_objects(self.ctx.short, self.client)
        tcp_settings.release_host_namespaces(self.ctx.short)

