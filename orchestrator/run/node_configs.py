"""What each node of a run is given at start: peerlab's own node its `NodeConfig`, an adapter's node
the node contract's config (node/contract.py) with its identity and T0; and whether a run's adapter
nodes can run here at all."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from node import contract
from node.adapters import INTEROP, PEERLAB, get_adapter
from node.config import ControlConfig, NodeConfig
from node.contract import Address
from node.dilation import REAL_TIME, Dilation
from node.identity import identity_seed
from node.ids import node_index
from node.interop import script as interop_script
from node.interop import shim
from node.protocols import get_protocol

if TYPE_CHECKING:
    from orchestrator.backends import Backend
    from orchestrator.model.plan import RunPlan


def adapter_problem(adapters: list[str], backend: Backend, plan: RunPlan) -> str | None:
    """Why the run's adapter nodes cannot run (a backend without them, an adapter not installed, a
    schedule a gossipsub-interop binary cannot be given)."""
    interop = [a for a in adapters if a.startswith(INTEROP)]
    if interop and backend.name != "local":
        return (f"{interop[0]}: gossipsub-interop binaries run on --backend local only so far (their host name "
                "and /etc/hosts are their own, set where the local backend starts them)")
    for node in plan.nodes:
        if node.implementation.startswith(INTEROP):
            try:
                interop_script.timed_actions({"node_id": node.id, "schedule": node.schedule,
                                              "late_subscriptions": node.late_subscriptions})
            except ValueError as e:
                return str(e)
    if adapters and not backend.runs_adapters:
        return (f"the {backend.name} backend runs peerlab's own nodes only so far; "
                f"{', '.join(adapters)} nodes run on --backend local, docker or kubernetes")
    if backend.adapters_in_images:  # built from their Dockerfiles, not run from .tools/
        return None
    for name in adapters:
        missing = get_adapter(name).missing()
        if missing:
            return f"implementation {name} is not installed ({missing[0]} is missing); install it with " \
                   f"`{get_adapter(name).install}`"
    return None


DIAL_RTTS = 4          # round trips of one libp2p dial: TCP, then multistream, Noise and the muxer
DIAL_CPU_S = 0.1       # and its CPU (keys, handshake) on a loaded machine
DIAL_MARGIN = 1.25


def _interop(adapters: list[str]) -> bool:
    return any(a.startswith(INTEROP) for a in adapters)


def connect_window(plan: RunPlan) -> int:
    """Whole seconds before T0 at which gossipsub-interop binaries make their connects: a binary dials its
    peers once each, one after another, so the slowest node's dials (its planned round trips, DIAL_RTTS
    each, and DIAL_CPU_S) must be over by T0, with a margin; at least the shim's CONNECT_BEFORE_T0."""
    lat = plan.latency_ms
    slowest = max((sum(DIAL_RTTS * (lat[n.index][plan.node(p).index] + lat[plan.node(p).index][n.index]) / 1000
                       + DIAL_CPU_S for p in n.dial) for n in plan.nodes if n.implementation.startswith(INTEROP)),
                  default=0.0)
    return max(shim.CONNECT_BEFORE_T0, math.ceil(DIAL_MARGIN * slowest))


def start_allowance(plan: RunPlan, adapters: list[str]) -> float:
    """Seconds from launching adapter nodes to the T0 written in their configs: their start-up (a
    js-libp2p node takes about 0.8 s of a 2-core machine: 30 nodes were up in 25 s; gossipsub-interop
    binaries start one per second, then all listen LISTEN_S before they connect: node/interop/shim.py)
    and connecting."""
    nodes = len(plan.nodes)
    if _interop(adapters):
        return 5.0 + nodes + shim.LISTEN_S + connect_window(plan)
    return 10.0 + 1.0 * nodes


def listening_before_t0(plan: RunPlan, adapters: list[str]) -> float:
    """Seconds before T0 by which every node of the run must be listening: gossipsub-interop binaries dial
    their peers once each at that instant (their scripts' `connect`), and a refused dial ends such a
    binary; other nodes dial until they are connected, so T0 itself."""
    return float(connect_window(plan)) if _interop(adapters) else 0.0


def restart_config(config: contract.ContractConfig, alive: Callable[[str], bool]) -> contract.ContractConfig:
    """The config a node is started again with (a restart, a join). A gossipsub-interop binary's peers
    made their connects long ago and it dials each peer once, ending if a dial fails: it dials the
    neighbours that are up now (a neighbour down meanwhile dials it when it comes back)."""
    if not config.implementation.startswith(INTEROP):
        return config
    return config.model_copy(update={"dial": [p for p in config.neighbours if alive(p)]})


def peer_ids(plan: RunPlan) -> dict[str, str]:
    """Every node's peer id (every contract config carries them all: an origin may be any node)."""
    return {n.id: contract.peer_id(identity_seed(plan.seed, n.id)) for n in plan.nodes}


def node_config(plan: RunPlan, node_id: str, backend: Backend, *, run_id: str, token: str, links: dict[str, Any],
                t0_ns: int | None, ids: dict[str, str], resources_interval: float,
                dilation: Dilation = REAL_TIME) -> contract.ContractConfig:
    """`plan`: the run's, in experiment time, which a dilated node's clock (`dilation`) keeps. `links`:
    what the run's shaper gives the node's own transport (delays, jitter and loss in transport mode, as
    its link's shape has them: a dilated run's times k; none otherwise)."""
    node = plan.node(node_id)
    b = backend
    listen = Address(host=b.address(node.id), port=b.data_port(node.id))
    peers = node.contacts or node.neighbours
    if node.implementation != PEERLAB:
        return contract.ContractConfig(
            run_id=run_id, node_id=node.id, protocol=node.protocol, implementation=node.implementation,
            params=node.params, seed=plan.seed, identity_seed=identity_seed(plan.seed, node_id),
            peer_ids=ids, listen=listen,
            peers={p: Address(host=b.address(p), port=b.data_port(p), peer_id=ids[p]) for p in peers},
            dial=node.dial, neighbours=node.neighbours, subscriptions=node.subscriptions,
            late_subscriptions=node.late_subscriptions, schedule=node.schedule, t0_ns=t0_ns, end_s=plan.end,
            connect_at_ns=(t0_ns - connect_window(plan) * 1_000_000_000
                           if t0_ns is not None and node.implementation.startswith(INTEROP) else None),
            event_log=b.event_log_path(node.id), resources_interval=resources_interval)
    return NodeConfig(
        run_id=run_id, node_id=node.id, protocol=node.protocol, params=node.params, role=node.role,
        seed=plan.seed, listen=listen, peers={p: Address(host=b.address(p), port=b.data_port(p)) for p in peers},
        directory={p: plan.node(p).subscriptions for p in node.contacts}
        if get_protocol(node.protocol).uses_directory else {},
        behaviour=node.behaviour, dial=node.dial, neighbours=node.neighbours, subscriptions=node.subscriptions,
        authors=node.authors, nodes=1 + max(node_index(n.id) for n in plan.nodes),
        late_subscriptions=node.late_subscriptions, schedule=node.schedule,
        control=ControlConfig(token=token, **b.control_endpoint(node.id)), event_log=b.event_log_path(node.id),
        **links,
        dilation=dilation.factor, dilation_epoch_ns=dilation.epoch_ns, resources_interval=resources_interval)
