"""The runner: one run, the same steps for every backend.

deploy -> shape -> start nodes -> connected -> calibrate -> barrier (T0) -> fault timeline -> drain
-> stop -> teardown -> collect -> analysis. Teardown runs whatever happens (errors, Ctrl-C, SIGTERM);
the run directory's `status` file says how the run ended.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from rich.console import Console

from node import contract
from node.adapters import PEERLAB
from node.dilation import Dilation
from orchestrator import shaping
from orchestrator.backends import Backend, RunContext, get_backend
from orchestrator.control.contract_client import ContractClient
from orchestrator.control.node_client import ControlClient, NodeError
from orchestrator.faults import rules as fault_rules
from orchestrator.faults.live_run import LiveFaults
from orchestrator.faults.next_shapes import LinkFaults
from orchestrator.fidelity.netprobe import NamespaceProbes
from orchestrator.fidelity.sampler import FidelityWatch
from orchestrator.model.fault_actions import ACTIONS
from orchestrator.model.plan import FaultEvent, RunPlan
from orchestrator.model.scenario import Scenario
from orchestrator.record.host_state import RunState, forget_run, record_run, scratch_root
from orchestrator.record.run_record import RunError, RunInterrupted, RunRecord
from orchestrator.run import admission, clock, interrupts, link_sampler, node_configs, priority
from orchestrator.run.calibrate import calibrate
from orchestrator.run.link_sampler import LinkSampler
from orchestrator.run.memory_watch import MemoryWatch, record_peak
from orchestrator.run.node_exits import ALLOW, NodeExits, summary
from orchestrator.run.readiness import Readiness
from orchestrator.shaping import dilated_cubic, tcp_settings


class Runner(Readiness, RunRecord):
    """A run on a real backend (nodes as processes, containers or pods)."""

    def __init__(self, scenario: Scenario, plan: RunPlan, *, backend: str | type[Backend] = "local",
                 console: Console | None = None, shaping_mode: str = "auto", label: str = "", force: bool = False,
                 admitted: dict[str, Any] | None = None):
        """`plan`: make_plan's, once admitted (`admitted`: admission.admit's record, else admitted here); `backend`:
        a name (orchestrator/backends) or a Backend class (the tests' loopback); `force`: run even if refused."""
        self.backend_cls = backend if isinstance(backend, type) else get_backend(backend)
        admitted = admission.admit(scenario, self.backend_cls.name, force) if admitted is None else admitted
        super().__init__(scenario, plan, backend=self.backend_cls.name, console=console, label=label)
        self.manifest["admission"] = admitted
        if admitted.get("forced"):
            self.warn("admission: the run does not fit this machine (--force): " + "; ".join(admitted["problems"]))
        for warning in admitted.get("warnings", []):
            self.warn("admission: " + warning)
        self.scratch = scratch_root() / self.short
        self.ctx = RunContext(self.run_id, self.short, self.run_dir, self.scratch, self.plan, secrets.token_hex(16))
        try:
            self.backend: Backend = self.backend_cls(self.ctx)
        except Exception:  # no engine, no cluster: nothing ran, so no run directory (nor scratch) either
            shutil.rmtree(self.run_dir, ignore_errors=True)
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        self.requested_mode = shaping_mode
        self.clients: dict[str, ControlClient | ContractClient] = {}
        self.configs: dict[str, contract.ContractConfig] = {}
        self.adapters = sorted({n.implementation for n in self.plan.nodes} - {PEERLAB})
        self.shaper: shaping.LinkShaper | None = None  # the run's links, once shaped
        self.probes = NamespaceProbes(self.backend)  # calibration of adapter nodes, from beside them
        # experiment time (node/dilation.py): T0, the timeline and the samples, as on the nodes' clocks
        self.dilation = Dilation(self.plan.dilation, time.time_ns())
        # every link's shape, as planned and as faults change it: latencies x k, rates / k (docs/dilation.md)
        self.links = LinkFaults(self.plan.link_shapes, self.plan.dilation)
        self.manifest["dilation"] = {**self.dilation.as_dict(), "applied": self.dilation.on}
        self.sampler = LinkSampler(self.backend, self.scratch / link_sampler.FILE, self.dilation)
        self.t0_ns: int | None = None
        self.manifest["clock"] = {"method": "shared host clock (all nodes on this machine)",
                                  "offsets_ns": {n.id: 0 for n in self.plan.nodes}}
        self.fidelity = FidelityWatch(self)  # orchestrator/fidelity: can the run's timing be trusted
        self.memory = MemoryWatch(self.backend.host_pids)  # the run's peak, beside admission's estimate
        self.exits = NodeExits(self.backend, self.run_dir, self.manifest, self.warn, self.dilation.time_ns, self._blocking)

    @property
    def present(self) -> list[str]:
        """Nodes started at deploy time (the others join during the run, or never)."""
        return [n.id for n in self.plan.nodes if not n.absent]

    @property
    def absent(self) -> set[str]:
        return {n.id for n in self.plan.nodes if n.absent}

    @staticmethod
    async def _blocking(fn: Any, *args: Any) -> Any:
        return await interrupts.blocking(fn, *args)

    # phases ------------------------------------------------------------------------------------
    def _check_adapters(self) -> None:
        problem = node_configs.adapter_problem(self.adapters, self.backend, self.plan)
        if problem:
            raise RunError(problem)

    @cached_property
    def peer_ids(self) -> dict[str, str]:
        return node_configs.peer_ids(self.plan) if self.adapters else {}

    def _node_config(self, node_id: str) -> contract.ContractConfig:
        assert self.shaper is not None
        return node_configs.node_config(self.plan, node_id, self.backend, run_id=self.run_id, token=self.ctx.token,
                                        links=self.shaper.node_delays(node_id),
                                        t0_ns=None if self.t0_ns is None else self._t0_for(node_id),
                                        ids=self.peer_ids,
                                        resources_interval=self.scenario.output.resources_interval,
                                        dilation=self.dilation)

    def _shaping_mode(self) -> tuple[str, str]:
        """orchestrator.shaping.choose_mode for what was asked: --shaping, else the scenario's network.shaping."""
        asked = self.requested_mode if self.requested_mode != "auto" else self.scenario.network.shaping
        try:
            return shaping.choose_mode(asked, self.backend.probe_netem(), self.backend.probe_delayline, self.adapters)
        except shaping.ModeError as err:
            raise RunError(str(err)) from None

    async def _shape(self, mode: str) -> None:
        self.shaper = shaping.shaper_for(mode, self.plan, self.backend, self._blocking,
                                         tell=lambda node, body: self.clients[node].post("/links", body), warn=self.warn)
        await self.shaper.apply_all(self.plan.link_shapes.values())

    async def _measure_clocks(self, node_ids: list[str], probes: NamespaceProbes | None = None) -> None:
        """Nodes on other machines (backend.shared_clock False): their clock offsets, into the manifest;
        through their control APIs, or (`probes`, for nodes without one) from their namespaces."""
        if self.backend.shared_clock:
            return
        if probes is None:
            measured = await clock.estimate({n: self.clients[n] for n in node_ids}, now_ns=self.dilation.time_ns)
        else:
            measured = await clock.estimate({n: probes.client(n) for n in node_ids},
                                            how="from a probe in each node's network namespace",
                                            now_ns=self.dilation.time_ns)
        clock.merge(self.manifest["clock"], measured, self.backend.clock_domains())

    def _t0_for(self, node_id: str) -> int:
        """T0 on the node's own clock."""
        assert self.t0_ns is not None
        return self.t0_ns + self.manifest["clock"]["offsets_ns"].get(node_id, 0)

    def _shaper_report(self) -> None:
        """The shaping mechanism's accounting into the manifest (the delay line's), and its warnings
        (it fell behind, a queue broke)."""
        assert self.shaper is not None
        stats, warnings = self.shaper.report()
        if stats is not None:
            self.manifest["shaping"]["delay_line"] = stats
        for warning in warnings:
            self.warn(warning)

    async def _calibrate(self, clients: dict[str, Any]) -> None:
        """RTT and throughput through the data plane, before T0: through peerlab's nodes (their probes
        see transport-mode delays too), or, for adapter nodes, before they start, by probes in their
        namespaces (orchestrator/fidelity/netprobe.py)."""
        if not self.scenario.calibration.enabled:
            return
        self.step("calibrate: RTT and throughput through the data plane")
        cal = await calibrate(self.plan, clients, self.scenario.calibration, self._link_sent)
        self.manifest["calibration"] = cal
        for w in cal["warnings"]:
            self.warn(f"calibration off by more than {cal['tolerance']:.0%}: {w}")
        self.step(f"calibration: RTT error {cal['latency_error_pct']}%, throughput error "
                  f"{cal['bandwidth_error_pct']}% "
                  f"({', '.join(str(r['measured_mbit']) for r in cal['throughput'])} Mbit/s in frames, "
                  f"{', '.join(str(r['goodput_mbit']) for r in cal['throughput'])} of payload)")

    async def _link_sent(self, node_id: str) -> int | None:
        """Bytes the node's link class has sent (headers included, as the rate counts them); None
        from a backend that does not shape (the tests' loopback backend records operations)."""
        assert self.shaper is not None
        return await self.shaper.sent(node_id)

    async def _start_all(self) -> None:
        if self.adapters:  # T0 was fixed before the nodes started (it is in their configs)
            assert self.t0_ns is not None
        else:
            lead = 1.0 + 0.01 * len(self.plan.nodes)  # time for every node to hear /start before T0
            self.t0_ns = self.dilation.time_ns() + int(self.dilation.experiment(lead) * 1e9)
        await asyncio.gather(*(self.clients[n].post("/start", {"t0": self._t0_for(n)}) for n in self.present))
        self.manifest["t0_ns"] = self.t0_ns

    async def _restart(self, node_id: str) -> None:
        if isinstance(self.clients[node_id], ContractClient):
            self.clients[node_id].launched()
        config = await self._blocking(node_configs.restart_config, self.configs[node_id], self.backend.alive)
        await self._blocking(self.backend.start_node, node_id, config)
        await self._wait_healthy([node_id], 30)
        if node_id not in self.manifest["clock"].get("rtt_ns", {}):  # a join: not measured yet
            await self._measure_clocks([node_id])
        await self.clients[node_id].post("/start", {"t0": self._t0_for(node_id)})

    async def _timeline(self) -> None:
        """Faults in time order. A kill, restart or join runs in the background (a restart is a process
        start, ~0.5 s; on a cluster a request through the API server's pod proxy besides), so that
        later faults keep their time; the next fault on the same node waits for it.
        A network-wide fault (partition, heal) waits for none: it changes the far ends of the links,
        which a node's restart leaves as they are (what a restarted node is told again is its own and
        its peers' degradations, per node)."""
        assert self.t0_ns is not None
        pending: dict[str, asyncio.Task] = {}

        assert self.shaper is not None
        live = LiveFaults(self.backend, self.shaper, self.clients, self.links, self._restart, self._blocking)

        async def execute(fault: FaultEvent) -> None:
            issued = self.dilation.time_ns()
            call = fault_rules.step(fault, live, self.backend.alive, self.links.degraded)  # not started yet
            if isinstance(call, fault_rules.Skipped):
                self.warn(call)
                return
            row = ACTIONS[fault.action]
            if row.leaves_node == "down":
                self.exits.down(fault.node)  # before it goes: its end is the timeline's, not its own
            await call
            if row.leaves_node == "up":
                self.exits.up(fault.node)
            took_effect = issued if row.instant else self.dilation.time_ns()
            self.manifest["faults_executed"].append(
                fault_rules.record(fault, took_effect, self.t0_ns, digits=3, issued_ns=issued))
            what = fault.node or (f"into {len(fault.groups)} sides" if fault.groups else "the network")
            self.step(f"fault: {fault.action} {what} at T0+{(took_effect - self.t0_ns) / 1e9:.2f}s")

        for fault in self.plan.faults:
            delay = self.t0_ns / 1e9 + fault.at - self.dilation.time()
            if delay > 0:
                await asyncio.sleep(self.dilation.real(delay))
            if fault.node in pending:
                await pending.pop(fault.node)
            if fault.node:
                pending[fault.node] = asyncio.create_task(execute(fault))
            else:
                await execute(fault)
        if pending:
            await asyncio.gather(*pending.values())
        remaining = self.t0_ns / 1e9 + self.plan.end - self.dilation.time()
        if remaining > 0:
            await asyncio.sleep(self.dilation.real(remaining))

    async def _stop_all(self) -> None:
        """Stop every node; where their logs are on this machine, each is stored as soon as its node
        has exited (and those of nodes already down at once), while the others are still stopping."""
        ids = [n.id for n in self.plan.nodes]
        alive = [n for n, up in zip(ids, await self._blocking(self.backend.each, self.backend.alive, ids)) if up]
        await asyncio.gather(*(self.clients[n].post("/stop", {"reason": "run finished"}) for n in alive),
                             return_exceptions=True)
        loop = asyncio.get_running_loop()
        store = self.backend.logs_on_host

        def store_log(node_id: str) -> None:
            self.store_log(node_id, self.backend.event_log(node_id))

        if store:
            for node_id in (n.id for n in self.plan.nodes if n.id not in alive):
                await loop.run_in_executor(None, store_log, node_id)
        for node_id in alive:
            code = await loop.run_in_executor(None, self.backend.wait_node, node_id, 10)
            if code is None:
                self.warn(f"{node_id} did not stop within 10s; killed")
                self.backend.kill_node(node_id)
            elif store:
                await loop.run_in_executor(None, store_log, node_id)

    # the run -----------------------------------------------------------------------------------
    async def _execute(self) -> None:
        plan = self.plan
        n = len(plan.nodes)
        self.step(f"plan: {n} nodes, protocol {plan.protocol}, {len(plan.topics)} topics, "
                  f"{plan.publishes()} publishes over {plan.duration:g}s, seed {plan.seed}")
        started = time.monotonic()
        self.fidelity.start()
        self.memory.start()
        self._check_adapters()
        self.step(f"deploy: {self.backend.name} backend, {n} network namespaces")
        # pyroute2's sync API runs an event loop of its own: netlink work goes to a worker thread
        await self._blocking(self.backend.create_network)
        self.manifest["tcp"] = dict(self.backend.sysctls)
        if self.backend.sysctls.get(tcp_settings.CONGESTION_SYSCTL) == dilated_cubic.NAME:
            self.step(f"tcp: {dilated_cubic.NAME}, cubic with its clocks in experiment time (x{plan.dilation:g}: "
                      "HyStart and the curve as undilated, docs/dilation.md#tcp)")
        # probed where the nodes run (on Kubernetes: in a pod, on the cluster's kernel)
        mode, why = await self._blocking(self._shaping_mode)
        self.manifest["shaping"] = {"mode": mode, "probe": why, "latency": shaping.MECHANISMS[mode].latency,
                                    "bandwidth": "HTB in the kernel (upload on the node, download on "
                                                 f"{self.backend.download_side})"}
        self.step(f"shape: {mode} mode ({why}); HTB on {2 * n} interfaces")
        await self._shape(mode)
        if self.adapters:  # before they start: T0 is in their configs, and the probes need no node
            await self._calibrate({n.id: self.probes.client(n.id) for n in plan.nodes})
            await self._measure_clocks([n.id for n in plan.nodes], self.probes)  # T0 on each node's clock
            await self.probes.close()
        await self.sampler.before_nodes(self.manifest)
        if self.adapters:
            lead = node_configs.start_allowance(plan, self.adapters)
            self.t0_ns = self.dilation.time_ns() + int(lead * 1e9)  # never dilated (adapters)
            self.step(f"nodes: {', '.join(self.adapters)}, T0 in their configs {lead:.0f}s from now")
        for node in plan.nodes:
            self.configs[node.id] = self._node_config(node.id)
            self.clients[node.id] = (self.backend.control(node.id) if node.implementation == PEERLAB
                                     else ContractClient(node.id, self.backend, node.neighbours, self._t0_for(node.id)))
        await self._blocking(self.backend.start_nodes, {n: self.configs[n] for n in self.present})
        if self.adapters:  # their T0 is fixed: wait for them until then, no longer
            await self._wait_healthy(self.present, (self.t0_ns - self.dilation.time_ns()) / 1e9
                                     - node_configs.listening_before_t0(self.plan, self.adapters))
            self.exits.start(self.present, lambda: self.t0_ns, self.plan.end)
            await self._wait_connected((self.t0_ns - self.dilation.time_ns()) / 1e9, fail=False)
        else:
            await self._wait_healthy(self.present, 30 + 0.3 * n)
            self.exits.start(self.present, lambda: self.t0_ns, self.plan.end)
            await self._wait_connected(self.dilation.real(30 + 0.2 * n))  # dials back off on the nodes' clocks
            await self._measure_clocks(self.present)
        self.manifest["startup_s"] = round(time.monotonic() - started, 2)
        self.step(f"nodes up and connected in {self.manifest['startup_s']:.1f}s")
        if not self.adapters:
            await self._calibrate(self.clients)
        await self._start_all()
        self.sampler.mark_at(self.t0_ns)  # the run's totals begin here
        with priority.Raised() as raised:
            self.manifest["orchestrator_nice"] = raised.nice
            self.step(f"T0: running {plan.end:g}s (warm-up {plan.warmup:g}s, publishing {plan.duration:g}s, "
                      f"drain {plan.drain:g}s, {len(plan.faults)} faults)"
                      + (f"; dilated x{plan.dilation:g}: {self.dilation.real(plan.end):g}s of real time, "
                         f"latencies x{plan.dilation:g}, rates /{plan.dilation:g}" if self.dilation.on else "")
                      + (f"; the orchestrator at nice {raised.nice}" if raised.nice is not None else ""))
            await self._timeline()
            await self.fidelity.stop()  # first: the exits' last look (an exec per pod on a cluster) loads the machine
            await self.exits.stop()
            if self.backend.name in admission.CHECKED_BACKENDS:  # the run's end, often its peak (memory_watch.py)
                try:
                    await self._blocking(self.memory.sample, True)
                except OSError as err:  # a figure missed is not a run failed
                    self.warn(f"memory at the drain's end not measured: {err}")
        self.step("drain over: stopping nodes")
        await self._stop_all()
        await self.sampler.stop()

    async def run_async(self) -> Path:
        record_run(RunState(self.short, self.run_id, os.getpid(), str(self.run_dir), str(self.scratch)))
        self.begin()
        status, detail = "failed", ""
        previous = interrupts.cancel_on_signals(asyncio.current_task(), self.backend.stopping)
        try:
            await self._execute()
            status = "completed"
            if self.exits.records and self.scenario.nodes.exits != ALLOW:
                status, detail = "failed", summary(self.exits.records)
        except asyncio.CancelledError:
            status, detail = "interrupted", "interrupted by a signal; torn down"
            raise
        except (RunError, NodeError, RuntimeError) as err:  # RuntimeError: what a backend says it cannot do
            detail = str(err)
            raise RunError(str(err)) from None
        finally:
            # a signal from here on stops the storing of the logs, never the teardown
            stop_storing = threading.Event()
            for sig in previous:
                signal.signal(sig, lambda *_: stop_storing.set())
            await self.exits.stop(look=False)
            await self.fidelity.finish()
            for client in self.clients.values():
                await client.close()
            await self.probes.close()
            await self.sampler.stop()  # (after an error: what was sampled is kept)
            record_peak(self.manifest, self.memory.finish(), self.backend.name in admission.CHECKED_BACKENDS,
                        self.memory.breakdown())
            self.step("teardown: stopping processes, removing namespaces")
            if self.shaper:
                self._shaper_report()
            await self._blocking(self.backend.teardown)
            if self.shaper:
                self.shaper.close()
            if self.sampler.path.exists():
                self.store_safely("the link counters", self.store.put_gzip, self.run_id, link_sampler.FILE + ".gz",
                                  self.sampler.path)
            problem = self.end(status, detail, {n.id: self.backend.event_log(n.id) for n in self.plan.nodes},
                               self.scratch, stop_storing)
            forget_run(self.short)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if stop_storing.is_set():  # (in place of a cancellation too: the user must learn where the logs are)
                raise RunInterrupted(f"run {self.run_id} interrupted while its logs were stored: {problem}")
        if problem:
            raise RunError(problem)
        return self.run_dir

    def run(self) -> Path:
        try:
            return asyncio.run(self.run_async())
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise RunInterrupted(f"run {self.run_id} interrupted; torn down") from None
