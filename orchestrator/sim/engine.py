"""A RunPlan executed in virtual time on the discrete-event network (node/simulated/virtual_network.py):
the `sim` backend.

The same plan a real backend deploys (each node's link shape as shaping applies it: latency towards
each contact, bandwidth; jitter, loss, subscriptions, dial lists, attackers, publish schedules, the
fault timeline) drives the same unchanged protocol cores; a link fault computes the next shapes as on
a live run (orchestrator/faults/next_shapes.py) and the network applies what changed (`_apply`); each node's events go to its own JSON-lines file, exactly as the node
runtime writes them (start, behaviour, t0, stop, connect/disconnect, and the core's own), so the
analysis and reports are the ones of emulated runs. Nothing here reads the wall clock except the
speed figures, so a seed gives the same event logs, bit for bit.

What is not modelled: CPU time (a core's work takes no virtual time), and of TCP what
node/simulated/tcp_window.py does not (docs/simulation.md): loss drops whole frames, as the
transport-mode emulation does.
May import: node/, orchestrator.model, orchestrator.faults (rules, next_shapes).
"""
from __future__ import annotations

import json
import resource
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from node import ids
from node.lifecycle import NodeLifecycle, NodeRandomness
from node.protocols import get_protocol
from node.simulated.virtual_network import MemNetwork
from orchestrator.faults import rules as fault_rules
from orchestrator.faults.next_shapes import LinkFaults
from orchestrator.model.fault_actions import LINK_METHODS
from orchestrator.model.link_shape import LinkShape, link_shapes
from orchestrator.model.plan import FaultEvent, RunPlan

FLUSH_EVERY = 200_000  # buffered event lines before they are appended to the files


class EventFiles:
    """Per-node JSON-lines files, written in batches (a simulation has no process to lose)."""

    def __init__(self, directory: Path, node_ids: list[str]):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.paths = {n: directory / f"{n}.jsonl" for n in node_ids}
        for path in self.paths.values():
            path.write_text("")
        self._buffers: dict[str, list[str]] = {n: [] for n in node_ids}
        self._pending = 0
        self.written = 0
        self._dumps = json.JSONEncoder(separators=(",", ":")).encode

    def __call__(self, node_id: str, event: dict[str, Any]) -> None:
        self._buffers[node_id].append(self._dumps(event))
        self._pending += 1
        if self._pending >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        for node_id, lines in self._buffers.items():
            if lines:
                with open(self.paths[node_id], "a", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
                lines.clear()
        self.written += self._pending
        self._pending = 0


@dataclass
class SimStats:
    nodes: int
    virtual_s: float = 0.0
    wall_s: float = 0.0
    engine_events: int = 0       # scheduled actions executed (frame hops, timers, publishes, ...)
    log_events: int = 0
    peak_in_flight_frames: int = 0
    peak_rss_mib: float = 0.0
    faults_executed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def speed(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.virtual_s / self.wall_s if self.wall_s else float("inf")

    @property
    def events_per_s(self) -> float:
        return self.engine_events / self.wall_s if self.wall_s else float("inf")

    def summary(self) -> str:
        return (f"{self.virtual_s:.1f} simulated s in {self.wall_s:.1f} wall s ({self.speed:.2f} sim s/wall s), "
                f"{self.engine_events:,} engine events ({self.events_per_s:,.0f}/s), {self.log_events:,} log events, "
                f"peak {self.peak_in_flight_frames:,} frames in flight, peak RSS {self.peak_rss_mib:.0f} MiB")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sim_s_per_wall_s": round(self.speed, 3),
                "engine_events_per_s": round(self.events_per_s)}


class SimHost:
    """What a node's lifecycle (node/lifecycle.py) runs on in virtual time."""

    def __init__(self, sim: "Simulation", node_id: str):
        self.net = sim.net
        self.node_id = node_id
        self._emit = sim._emit

    @property
    def core(self):
        return self.net.nodes[self.node_id].core

    def trace(self, type_: str, **fields: Any) -> None:
        self._emit(self.node_id, type_, **fields)

    def connect(self, peer: str) -> None:
        self.net.connect(self.node_id, peer)

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> int:
        return self.net.schedule_at(when, fn, *args)

    def cancel(self, handle: int) -> None:
        self.net.cancel(handle)

    def guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)  # a core's exception stops a simulation: it is a bug to see, not to survive

    def clock(self) -> float:
        return self.net.now


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Simulation:
    """Builds the network from the plan; `run()` executes start-up, T0, the schedule and the faults.

    `sink(node_id, event)` gets every event (None: the in-memory network keeps them per node, schema-checked);
    `bandwidth=False` drops the bandwidth model (latency only: quicker parameter sweeps)."""

    def __init__(self, plan: RunPlan, sink: Callable[[str, dict[str, Any]], None] | None = None, *,
                 bandwidth: bool = True, keep_deliveries: bool = False):
        self.plan = plan
        self.links = LinkFaults(link_shapes(plan, 1.0), 1.0)  # virtual time: never dilated
        self._applied: dict[str, LinkShape] = dict(self.links.planned)  # what the network has now
        delay = {node: {p: ms / 1000 for ms, peers in shape.delays for p in peers}
                 for node, shape in self.links.planned.items()}

        def latency(a: str, b: str) -> float:
            try:
                return delay[a][b]
            except KeyError:  # (the network dials only contacts: `addresses`, as a node's config gives them)
                raise RuntimeError(f"sim: a frame between {a} and {b}, which the plan does not make contacts "
                                   f"(RunPlan's `contacts`: the peers a node may reach; shaping gives no "
                                   f"other a latency)") from None
        self.net = MemNetwork(plan.seed, latency, jitter=plan.jitter_ms / 1000, loss=plan.loss, sink=sink,
                              keep_deliveries=keep_deliveries, addresses={n: set(d) for n, d in delay.items()},
                              core_rng=lambda node_id: self._randomness[node_id].core)
        self.bandwidth = bandwidth
        self.t0 = 0.5 + 2 * max((delay[n.id][p] for n in plan.nodes for p in n.dial), default=0.0)
        self.stats = SimStats(nodes=len(plan.nodes))
        self._randomness: dict[str, NodeRandomness] = {}  # each node process's, as its runtime draws them
        self.lives: dict[str, NodeLifecycle] = {}
        self.net.before_boot = self._started
        self.sent: list[tuple[float, str, str, str]] = []  # (t_pub, topic, origin, msg_id)

    def _emit(self, node_id: str, type_: str, **fields: Any) -> None:
        self.net.emit(node_id, {"ts": int(self.net.now * 1e9), "node": node_id, "type": type_, **fields})

    def _life(self, node_id: str) -> NodeLifecycle:
        """A new process's lifecycle (a restart gets a new one, as the runtime's process does)."""
        rngs = self._randomness[node_id] = NodeRandomness.of(self.plan.seed, node_id)
        life = self.lives[node_id] = NodeLifecycle(node_id, self.plan.node(node_id), SimHost(self, node_id),
                                                   rngs.life)
        life.on_publish = lambda topic, msg_id: self.sent.append((self.net.now - self.t0, topic, node_id, msg_id))
        return life

    def _started(self, node_id: str) -> None:
        self.lives[node_id].announce()

    def _add(self, node_id: str) -> None:
        node = self.plan.node(node_id)
        cls = get_protocol(node.protocol)
        shape = self._applied[node_id]
        up, down = (shape.up_bps, shape.down_bps) if self.bandwidth else (0, 0)
        self._life(node_id)
        self.net.add_node(node_id, cls, cls.Params(**node.params), ip=ids.address(node_id),
                          behaviour=node.behaviour or None, bandwidth=(up, down) if up and down else None)

    def _restart(self, node_id: str) -> None:
        self._life(node_id)
        self.net.restart(node_id)
        self.lives[node_id].join()

    def _arm(self, node_id: str) -> None:
        self.lives[node_id].arm(int(self.t0 * 1e9))

    def _fault(self, fault: FaultEvent) -> None:
        """Execute one fault by the runner's rules (orchestrator/faults/rules.py), at its exact virtual time."""
        done = fault_rules.step(fault, self, lambda n: n in self.net.nodes and self.net.nodes[n].up,
                                self.links.degraded)
        if isinstance(done, fault_rules.Skipped):
            return  # the runner warns and skips these too
        self.stats.faults_executed.append(fault_rules.record(fault, int(self.net.now * 1e9), int(self.t0 * 1e9)))

    # the FaultExecutor of orchestrator/faults/rules.py, on the discrete-event network
    def kill(self, node: str) -> None:
        self.lives[node].disarm()  # a killed process takes its timers with it
        self.net.crash(node, reason="closed by peer")

    def stop(self, node: str) -> None:
        self.lives[node].stop("fault timeline")
        self.net.crash(node, reason="closed by peer")

    def start(self, node: str) -> None:
        if node in self.net.nodes:
            self._restart(node)
        else:
            self._add(node)
            self.lives[node].join()
        self._arm(node)

    def __getattr__(self, method: str) -> Callable[..., None]:
        """A row's method that changes links: its next shapes from the link faults, applied (as on a live run)."""
        if method not in LINK_METHODS:
            raise AttributeError(f"{type(self).__name__} has no {method!r}")
        next_shapes = getattr(self.links, method)
        return lambda *args: self._apply(next_shapes(*args))

    # what of a link's shape the discrete-event network changes mid-run (MemNetwork.degrade and cut_off)
    APPLIED = ("up_bps", "down_bps", "added_delay_ms", "added_loss", "added_jitter_ms", "cut_from")

    def _apply(self, shapes: list[LinkShape]) -> None:
        """The network's links as these shapes say, changing what differs from the shapes it has (as the
        emulation's shaper does): a degradation and the rates, then the cuts, all at once."""
        cuts: dict[str, frozenset[str]] = {}
        for shape in shapes:
            was = self._applied[shape.node]
            if replace(shape, **{f: getattr(was, f) for f in self.APPLIED}) != was:  # a field the network lacks
                raise NotImplementedError(f"sim: {shape.node}'s link changes in a way the simulated network does "
                                          f"not apply (it applies {', '.join(self.APPLIED)}): {was} -> {shape}")
            rates = (shape.up_bps, shape.down_bps)
            changed_rates = rates != (was.up_bps, was.down_bps)
            if changed_rates or shape.degradation != was.degradation:
                self.net.degrade(shape.node, shape.added_delay_ms / 1000, shape.added_loss,
                                 rates if changed_rates else None, shape.added_jitter_ms / 1000)
            if shape.cut_from != was.cut_from:
                cuts[shape.node] = shape.cut_from
            self._applied[shape.node] = shape
        if cuts:
            self.net.cut_off(cuts)

    def start_up(self) -> None:
        """Every node starts, subscribes and dials; virtual time runs to T0 (connections are up)."""
        present = [n.id for n in self.plan.nodes if not n.absent]
        for node_id in present:
            self._add(node_id)
        for node_id in present:  # once all are there, so no first dial finds its peer missing
            self.lives[node_id].join()
        self.net.run(until=self.t0)

    def run(self, progress: Callable[[str], None] | None = None, every: float = 10.0) -> SimStats:
        started = time.perf_counter()
        net, plan = self.net, self.plan
        self.start_up()
        for node_id in list(net.nodes):
            self._arm(node_id)
        for fault in plan.faults:
            net.schedule(fault.at, lambda f=fault: self._fault(f))
        end = self.t0 + plan.end
        mark = self.t0
        while mark < end:
            mark = min(end, mark + every)
            net.run(until=mark, max_events=1 << 62)
            if progress:
                wall = time.perf_counter() - started
                progress(f"sim: T0+{mark - self.t0:.0f}s of {plan.end:g}s, {net.processed:,} events, "
                         f"{wall:.0f}s wall, {net.in_flight:,} frames in flight")
        for node_id, node in net.nodes.items():
            if node.up:
                self.lives[node_id].stop("run finished")
        self.stats.virtual_s = round(end, 6)
        self.stats.wall_s = round(time.perf_counter() - started, 3)
        self.stats.engine_events = net.processed
        self.stats.peak_in_flight_frames = net.peak_in_flight
        self.stats.peak_rss_mib = round(_peak_rss_mib(), 1)
        return self.stats
