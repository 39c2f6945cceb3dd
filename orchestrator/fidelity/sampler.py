"""The fidelity watch of one live run: samples through the run, from deploy to the end of the drain,
and at the end the manifest's `fidelity` section (figures and verdict per phase, by the rule of
orchestrator/fidelity/rule.py).

- the host's CPU every INTERVAL_S or so (orchestrator/fidelity/host.py), the run queue at random
  instants in between, where the nodes run on this machine (local and Docker backends; not
  Kubernetes, whose nodes run elsewhere);
- each of peerlab's nodes' loop lag (node/process/looplag.py), read at the end of each phase;
- the delay line's lateness histogram, read at the end of each phase (when the run uses it);
- RTT probes from T0 on (orchestrator/fidelity/probes.py); before T0, calibration's own.

The runner calls `start` as the deploy begins, `stop` when the drain is over (the nodes still up),
and `finish` whatever happened. PEERLAB_FIDELITY=0 turns the sampling off (to measure its cost)."""
from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from node.adapters import PEERLAB
from orchestrator.control.node_client import ControlClient
from orchestrator.fidelity import figures, host, rule
from orchestrator.fidelity.netprobe import NamespaceProbes
from orchestrator.fidelity.probes import INTERVAL_S as PROBE_INTERVAL_S
from orchestrator.fidelity.probes import PAIRS, PINGS, RttProbes
from orchestrator.fidelity.text import phase_line

INTERVAL_S = 1.0
RUNQ_READS = 4  # run-queue readings per host sample
LAG_TIMEOUT_S = 3.0
OFF_ENV = "PEERLAB_FIDELITY"


def enabled() -> bool:
    return os.environ.get(OFF_ENV, "1") != "0"


class FidelityWatch:
    """`run`: the runner (orchestrator/run/runner.py); read are its plan, backend, clients, t0_ns,
    shaper, dilation, links (its link faults: which nodes are degraded), manifest, step and warn.
    Phases are told apart in experiment time (the dilated clock T0 is on)."""

    def __init__(self, run: Any):
        self.run = run
        self.on_host = run.backend.shared_clock  # the nodes share this machine (and its clock)
        self.cores = host.cores()
        self.load_end_s = run.plan.warmup + run.plan.duration
        self.samples: dict[str, list[host.Sample]] = {p: [] for p in rule.PHASES}
        self.lag: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in rule.PHASES}
        self.lag_from: dict[str, int] = {}
        self.late: dict[str, dict[str, int]] = {}
        self.late_total: dict[str, int] | None = None
        self.probed: dict[str, list[dict[str, Any]]] = {p: [] for p in rule.PHASES}
        self.spans: dict[str, list[int]] = {}
        self.closed: list[str] = []
        self.tasks: list[asyncio.Task] = []
        self.cpu_s = 0.0  # the watch's own CPU time on the event loop's thread
        adapters = any(n.implementation != PEERLAB for n in run.plan.nodes)
        self.probes = RttProbes(run.plan, lambda n: run.clients[n], NamespaceProbes(run.backend) if adapters else None,
                                lambda: run.links.degraded)
        self.started = False
        self.rng = random.Random()

    def phase(self, wall_ns: int) -> str:
        t0 = self.run.t0_ns
        if t0 is None or wall_ns < t0:
            return rule.BEFORE_T0
        return rule.LOAD if wall_ns < t0 + self.load_end_s * 1e9 else rule.DRAIN

    def start(self) -> None:
        if not enabled():
            return
        self.started = True
        self.spans[rule.BEFORE_T0] = [self.run.dilation.time_ns()]
        if self.on_host:
            self.tasks.append(asyncio.create_task(self._host_loop()))
        self.tasks.append(asyncio.create_task(self._phase_loop()))

    async def _host_loop(self) -> None:
        before = host.read(time.monotonic())
        while True:
            readings = []
            for _ in range(RUNQ_READS):  # the run queue at random instants: periodic wake-ups (the
                # nodes' resource samples, the link sampler) would bias readings made in step with them
                await asyncio.sleep(self.rng.uniform(0.5, 1.5) * INTERVAL_S / RUNQ_READS)
                spent = time.thread_time()
                readings.append(host.running())
                self.cpu_s += time.thread_time() - spent
            spent = time.thread_time()
            after = host.read(time.monotonic(), mean_running=sum(readings) / len(readings))
            self.samples[self.phase(self.run.dilation.time_ns())].append(host.sample(before, after, self.cores))
            before = after
            self.cpu_s += time.thread_time() - spent

    async def _sleep_until(self, at_ns: int) -> None:
        await asyncio.sleep(self.run.dilation.real(max(0.0, (at_ns - self.run.dilation.time_ns()) / 1e9)))

    async def _phase_loop(self) -> None:
        while self.run.t0_ns is None:
            await asyncio.sleep(0.2)
        t0 = self.run.t0_ns
        await self._sleep_until(t0)
        await self._close(rule.BEFORE_T0)
        self.tasks.append(asyncio.create_task(self.probes.every(PROBE_INTERVAL_S, self._probed)))
        await self._sleep_until(t0 + int(self.load_end_s * 1e9))
        await self._close(rule.LOAD)

    def _probed(self, probe: dict[str, Any]) -> None:
        self.probed[self.phase(self.run.dilation.time_ns())].append(probe)

    async def _lag(self, node_id: str) -> tuple[str, dict[str, Any] | None]:
        client = self.run.clients.get(node_id)
        if not isinstance(client, ControlClient):
            return node_id, None
        try:
            window = await client.get(f"/loop_lag?from={self.lag_from.get(node_id, 0)}", timeout=LAG_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a node down (the fault timeline) has no figure for the phase
            return node_id, None
        self.lag_from[node_id] = window["next"]
        return node_id, window

    async def _close(self, phase: str) -> None:
        """The end of `phase`: the nodes' loop lag and the delay line's lateness over it."""
        if phase in self.closed:
            return
        self.closed.append(phase)
        now = self.run.dilation.time_ns()
        self.spans.setdefault(phase, [now]).append(now)
        following = rule.PHASES[rule.PHASES.index(phase) + 1:]
        if following:
            self.spans[following[0]] = [now]
        answers = await asyncio.gather(*(self._lag(n.id) for n in self.run.plan.nodes))
        self.lag[phase] = {n: w for n, w in answers if w is not None}
        if self.run.shaper is not None and self.run.shaper.counts_lateness:
            try:
                stats = await asyncio.to_thread(self.run.shaper.stats)
            except RuntimeError as err:
                self.run.warn(f"fidelity: delay line stats: {err}")
                return
            self.late[phase] = figures.delta(stats["late_ms"], self.late_total)
            self.late_total = stats["late_ms"]

    async def _cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
        await self.probes.close()

    async def stop(self) -> None:
        """The drain is over and the nodes are still up: the last phase's figures."""
        if not self.started:
            return
        await self._cancel()
        current = self.phase(self.run.dilation.time_ns())
        for phase in rule.PHASES[:rule.PHASES.index(current) + 1]:
            await self._close(phase)

    def section(self) -> dict[str, Any]:
        foreign = [n.id for n in self.run.plan.nodes if n.implementation != PEERLAB]
        calibration = (self.run.manifest.get("calibration") or {}).get("rtt") or []
        probed = {**self.probed, rule.BEFORE_T0: [*calibration, *self.probed[rule.BEFORE_T0]]}
        phases = {}
        for p in rule.PHASES:
            fig: dict[str, Any] = {"from_ns": self.spans.get(p, [None])[0],
                                   "to_ns": (self.spans.get(p) or [None, None])[-1] if p in self.closed else None}
            fig["host"] = (figures.host_figures(self.samples[p]) if self.on_host else
                           {"samples": 0, "note": "not measured: the nodes run on other machines"})
            fig["loop_lag"] = figures.lag_figures(self.lag[p], foreign) if p in self.closed else {"nodes": 0}
            fig["probes"] = figures.probe_figures(probed[p])
            if self.run.shaper is not None and self.run.shaper.counts_lateness:
                fig["delay_line"] = figures.delay_line_figures(self.late.get(p))
            phases[p] = rule.judge_phase(fig)
        verdict, why = rule.overall(phases)
        executed = self.run.manifest.get("faults_executed") or []
        late = rule.fault_reasons(executed) + rule.exit_reasons(self.run.manifest.get("node_exits") or [])
        if late:
            verdict, why = rule.UNFAITHFUL, [*why, *late]
        return {"verdict": verdict, "reasons": why, "line": rule.line(verdict, why),
                "faults": {"count": len(executed), "threshold_s": rule.THRESHOLDS.fault_late_s,
                           "late_s_max": round(max((x for _, x in rule.fault_lateness(executed)), default=0.0), 3)},
                "rule": rule.describe(), "thresholds": rule.THRESHOLDS.as_dict(), "phases": phases,
                "sampling": {"host_interval_s": INTERVAL_S, "run_queue_reads": RUNQ_READS, "cores": self.cores, "psi": host.has_psi(),
                             "probe_interval_s": PROBE_INTERVAL_S, "probe_pairs": PAIRS, "pings_per_probe": PINGS,
                             "probe_pings": self.probes.pings, "probe_bytes_on_links": self.probes.traffic_bytes()},
                "cost": {"sampler_cpu_s": round(self.cpu_s, 4)}}

    async def finish(self) -> None:
        """Whatever happened: the tasks ended and the section in the manifest, with a line per phase."""
        if not self.started:
            return
        await self._cancel()
        section = self.run.manifest["fidelity"] = self.section()
        for name, phase in section["phases"].items():
            self.run.step(f"fidelity, {name}: {phase_line(phase)}")
