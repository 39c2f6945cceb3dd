"""What every backend provides; the runner (`orchestrator.run.runner`) does all the rest the same way.

A backend differs from another only in: making the network, starting and stopping a node, the access
through which shaping's operations reach a node's network namespace and the far end of its link
(`namespaces`: orchestrator/shaping/namespace_access.py), reaching its control API, and fetching its
event log.

A Backend is what orchestrator/shaping (`ShapingBackend`, with `LinkEnds`) and orchestrator/control
(`ContractBackend`) declare they need of one; they never import this package. May import: shaping,
control.node_client, store.durable, model.plan, node.contract.
"""
from __future__ import annotations

import abc
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from node.contract import ContractConfig
from orchestrator.control.node_client import ControlClient
from orchestrator.model.plan import RunPlan
from orchestrator.shaping import tc
from orchestrator.shaping.mechanisms import LinkEnds
from orchestrator.shaping.namespace_access import InProcess, NamespaceAccess
from orchestrator.store.durable import private_dir

T = TypeVar("T")
R = TypeVar("R")
SIDE_BY_SIDE = 16  # calls at once where each is a round trip to a container engine


@dataclass
class RunContext:
    run_id: str
    short: str        # 6 hex digits, used in names of kernel objects (interface names are short)
    run_dir: Path     # where the store keeps this run
    scratch: Path     # live files of the run: configs, sockets, logs being written
    plan: RunPlan
    token: str        # control API bearer token


def far_end_counters(handle, ports: dict[str, str]) -> dict[str, dict[str, int]]:
    """Each node's traffic read at the far end of its link (`ports`: interface name -> node id, in the
    namespace `handle` (pyroute2) dumps): what that end received, the node sent, and the other way."""
    out = {}
    for link in handle.get_links():
        node = ports.get(link.get_attr("IFLA_IFNAME"))
        stats = link.get_attr("IFLA_STATS64")
        if node and stats:
            out[node] = {"sent_bytes": stats["rx_bytes"], "received_bytes": stats["tx_bytes"],
                         "sent_packets": stats["rx_packets"], "received_packets": stats["tx_packets"]}
    return out


def file_tail(path: Path, lines: int) -> str:
    """The last lines of a node's saved output, for error messages."""
    try:
        with open(path, errors="replace") as f:
            return "".join(deque(f, lines)).rstrip() or "(no output)"
    except FileNotFoundError:
        return "(no output)"


def side_by_side(fn: Callable[[T], R], items: Iterable[T], workers: int = SIDE_BY_SIDE) -> list[R]:
    """fn(item) for every item on a pool of threads, results in order; the first failure is raised
    once every call has ended."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, item) for item in items]
    return [f.result() for f in futures]


class StopRequested(RuntimeError):
    """A step of the run left off because SIGINT or SIGTERM asked the run to stop."""


class Backend(abc.ABC):
    name: str
    shared_clock = True  # every node reads this machine's clock; else the runner measures offsets
    download_side = "the switch"  # where the download cap sits (the far end of the node's link)
    counters_where = "each node's link, at its switch port"  # where link_counters reads (the manifest says)
    poll_s = 0.2  # how often the runner asks a starting node whether it is up (and connected)
    round_trips = False  # each call into a node's sandbox is a round trip to an engine: `each` runs them side by side
    # how often the runner looks for nodes that exited on their own (orchestrator/run/node_exits.py); None:
    # once, at the drain's end (a look is an exec through an API server per node, which loads the run)
    exit_watch_s: float | None = 0.5
    runs_adapters = False  # can start an adapter's node (node/adapters) and stop it with SIGTERM
    adapters_in_images = False  # runs them from their images (node/adapters/*/Dockerfile), not from .tools/
    has_delayline = False  # the delay line (orchestrator/shaping/delayline.py) reaches its namespaces
    logs_on_host = True  # event_log() is the file the node writes, on this machine, during the run
    needs_root = True  # makes namespaces, containers or tc qdiscs on this machine (`peerlab run` says so first)

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        # the run's scratch holds the nodes' configs, with the run's control token, and (locally) their
        # control sockets: no other user may enter it
        private_dir(ctx.scratch)
        self.stopping = threading.Event()  # set on SIGINT/SIGTERM: long steps stop between nodes
        # where shaping's operations run (orchestrator/shaping/namespace_access.py): here, this machine's
        # namespaces in process; a container backend hands its own
        self.namespaces: NamespaceAccess = InProcess()
        self.sysctls: dict[str, str] = {}  # every node namespace's TCP (create_network; the manifest's `tcp`)

    def check_stop(self) -> None:
        """Between the nodes of a long step (deploy, shaping): stop it if the run is being stopped;
        teardown then removes what exists."""
        if self.stopping.is_set():
            raise StopRequested("stopped by a signal")

    @abc.abstractmethod
    def create_network(self) -> None:
        """Make the run's data network (bridge, links, addresses). Nothing is shaped yet."""

    def clock_domains(self) -> dict[str, str]:
        """Where nodes are on other machines (shared_clock False): node -> the machine whose clock it
        reads (a pod's cluster node), so that nodes on one machine get one offset; {} if unknown."""
        return {}

    @abc.abstractmethod
    def address(self, node_id: str) -> str:
        """The node's data-plane IPv4 address."""

    @abc.abstractmethod
    def data_port(self, node_id: str) -> int: ...

    @abc.abstractmethod
    def link_ends(self, node_id: str) -> LinkEnds: ...

    @abc.abstractmethod
    def control_endpoint(self, node_id: str) -> dict[str, str]:
        """Where the node serves its control API (`unix` path, or `host`/`port`), as the node sees it."""

    @abc.abstractmethod
    def event_log_path(self, node_id: str) -> str:
        """Where the node writes its event log, as the node sees it."""

    def probe_delayline(self) -> tuple[bool, str]:
        """Can the delay line hold the nodes' packets? Here: NFQUEUE on this machine."""
        if not self.has_delayline:
            return False, f"the {self.name} backend has no delay line"
        from orchestrator.shaping import delayline

        return delayline.probe()

    def read_event_log(self, node_id: str, offset: int) -> bytes:
        """The node's event log from byte `offset` on, while it runs (nothing yet: empty)."""
        try:
            with open(self.event_log(node_id), "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""

    def probe_netem(self) -> tuple[bool, str]:
        """Can the kernel the nodes run on attach netem? Here: this machine's."""
        return tc.probe_netem()

    def each(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """fn(item) for every item, results in order: in turn, or side by side where each call is a
        round trip to a container engine (`round_trips`). The first failure is raised, once every
        call made has ended (teardown then sees all they created)."""
        if not self.round_trips:
            return [fn(item) for item in items]
        return side_by_side(fn, items)

    def start_nodes(self, configs: dict[str, ContractConfig]) -> None:
        """`start_node` for each, stopping between two if the run is being stopped."""
        def start(item: tuple[str, ContractConfig]) -> None:
            self.check_stop()
            self.start_node(*item)
        self.each(start, configs.items())

    def link_counters(self) -> dict[str, dict[str, int]] | None:
        """Every node's kernel counters, as its link sees them: bytes and packets it sent and received
        (headers, handshakes and retransmissions included). None where the backend cannot read them."""
        return None

    def host_pids(self) -> list[int]:
        """The run's processes on this host outside the orchestrator's own process tree (each with
        its descendants), for the run's memory (orchestrator/run/memory_watch.py): none where every
        process is the orchestrator's child (local) or on other machines (kubernetes)."""
        return []

    @abc.abstractmethod
    def start_node(self, node_id: str, config: ContractConfig) -> None:
        """Start the node's process: peerlab's node for a `NodeConfig`, else its adapter's command."""

    def stop_node(self, node_id: str) -> None:
        """SIGTERM (nodes without a control API stop this way)."""
        raise NotImplementedError(f"the {self.name} backend runs peerlab's own nodes only so far")

    @abc.abstractmethod
    def kill_node(self, node_id: str) -> None:
        """SIGKILL: the node gets no chance to say goodbye."""

    @abc.abstractmethod
    def wait_node(self, node_id: str, timeout: float) -> int | None:
        """Wait for the node process to end; its exit code, or None if still running."""

    @abc.abstractmethod
    def alive(self, node_id: str) -> bool: ...

    @abc.abstractmethod
    def control(self, node_id: str) -> ControlClient: ...

    @abc.abstractmethod
    def event_log(self, node_id: str) -> Path:
        """A local path to the node's event log (fetched first if it lives elsewhere)."""

    @abc.abstractmethod
    def output_tail(self, node_id: str, lines: int = 10) -> str:
        """The last lines the node process printed (for error messages)."""

    @abc.abstractmethod
    def teardown(self) -> None:
        """Remove everything the run made; safe to call twice."""
