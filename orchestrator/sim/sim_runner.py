"""`peerlab run --backend sim`: a run executed by the discrete-event simulation (orchestrator/sim/engine.py)
and stored exactly like an emulated one (manifest, events/<node>.jsonl.gz, status), so `peerlab
report` and `peerlab compare` treat both alike. The manifest says `backend: sim` and holds the
simulation's speed figures under `sim`."""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.fidelity.text import virtual_time
from orchestrator.model.plan import RunPlan
from orchestrator.model.scenario import Scenario
from orchestrator.record.run_record import RunError, RunRecord
from orchestrator.sim.engine import EventFiles, Simulation

# virtual time is experiment time already, with an infinitely fast CPU: dilating it would scale every
# latency, rate and timer by k and every timestamp back by 1/k, for the same events (docs/dilation.md)
NO_DILATION = ("recorded, not applied: the simulator's virtual time is experiment time and its CPU is "
               "infinitely fast, so a dilated run gives the undilated run's events")
# node/simulated/access_link.py's window is slow start with Linux's idle restart and window validation: cubic's and
# reno's behaviour without loss, not bbr's (docs/shaping.md#tcp)
TCP_MODEL = "slow start from 10 segments, restart after an idle RTO, window validation (cubic or reno without loss)"


class SimInterrupted(RuntimeError):
    """Ctrl-C stopped the simulation; the run directory says so."""


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class SimRunner(RunRecord):
    def __init__(self, scenario: Scenario, plan: RunPlan, *, console: Console | None = None, label: str = ""):
        super().__init__(scenario, plan, backend="sim", console=console, label=label)
        # inside the run directory: a simulation killed outright leaves nothing elsewhere
        self.scratch = self.run_dir / ".sim-events"
        self.manifest["shaping"] = {
            "mode": "simulated", "probe": "no kernel involved",
            "latency": "per-pair one-way delay (the shaping buckets), jitter and loss in the simulator",
            "bandwidth": "per-node uplink shared by the connections sending (each in order, priority lane first; frames in flights of the congestion window) and download FIFO, with TCP/IP header overhead",
            "tcp": TCP_MODEL}
        self.manifest["clock"] = {"method": "virtual time (one clock for every node)",
                                  "offsets_ns": {n.id: 0 for n in self.plan.nodes}}
        self.manifest["dilation"] = {"factor": self.plan.dilation, "applied": False, "note": NO_DILATION}
        self.manifest["fidelity"] = virtual_time()

    def run(self) -> Path:
        previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM ends it like Ctrl-C: status written
        try:
            return self._run()
        finally:
            signal.signal(signal.SIGTERM, previous)

    def _run(self) -> Path:
        plan = self.plan
        self.begin()
        self.step(f"plan: {len(plan.nodes)} nodes, protocol {plan.protocol}, {len(plan.topics)} topics, "
                  f"{plan.publishes()} publishes over {plan.duration:g}s, seed {plan.seed}")
        if plan.dilation != 1:
            self.step(f"dilation x{plan.dilation:g} {NO_DILATION}")
        if plan.tcp_congestion not in ("cubic", "reno"):
            self.warn(f"network.tcp_congestion is {plan.tcp_congestion}; the simulator models TCP as {TCP_MODEL}, "
                      "whatever the setting")
        files = EventFiles(self.scratch, [n.id for n in plan.nodes])
        status, detail = "failed", ""
        try:
            sim = Simulation(plan, files)
            self.step(f"simulate: virtual time, T0 at {sim.t0:.3f}s, then {plan.end:g}s "
                      f"(warm-up {plan.warmup:g}s, publishing {plan.duration:g}s, drain {plan.drain:g}s, "
                      f"{len(plan.faults)} faults)")
            stats = sim.run(progress=self.step, every=max(5.0, plan.end / 10))
            files.flush()
            stats.log_events = files.written
            self.manifest.update(t0_ns=int(sim.t0 * 1e9), faults_executed=stats.faults_executed,
                                 sim=stats.as_dict())
            self.step(f"sim: {stats.summary()}")
            status = "completed"
        except KeyboardInterrupt:
            status, detail = "interrupted", "interrupted by Ctrl-C"
            raise SimInterrupted(f"run {self.run_id} interrupted") from None
        except Exception as err:
            detail = f"{err.__class__.__name__}: {err}"
            raise
        finally:
            if status == "completed":
                self.step("storing event logs (gzip)")
            disk_full = self.end(status, detail, files.paths if status == "completed" else {}, self.scratch)
        if disk_full:
            raise RunError(disk_full)
        return self.run_dir
