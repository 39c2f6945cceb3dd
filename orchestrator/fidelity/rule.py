"""The rule that turns a phase's figures (orchestrator/fidelity/figures.py) into a verdict, and its
thresholds, all here. A phase is unfaithful when any one of these holds; each that holds is a reason:

- probes: more than half of the RTT probes in the phase are off the plan's RTT by more than
  RTT_ERROR_SHARE of it plus RTT_ERROR_MS (the probes cross the same shaping as the protocol's
  frames: the most direct evidence);
- node loop lag: more than LAG_LATE_SHARE of all the nodes' ticks together woke more than LAG_MS
  late (their p95 is above it, with the defaults): every timer of a node, the transport's held
  frames included, fires as late as its ticks;
- delay line: DELAYLINE_LATE_SHARE or more of its packets left 10 ms or more after their time;
- faults (the run, not a phase): a fault of the timeline more than fault_late_s after its time;
- node exits (the run): a node the timeline did not stop exited on its own before the drain's end
  (orchestrator/run/node_exits.py): from then on the run measures a smaller network than planned,
  whatever its timing;
- host: for more than HOST_SHARE of the phase's samples, CPU pressure (PSI some, per sample) above
  PSI_SOME_PCT, or steal above STEAL_SHARE; runnable tasks above RUNNABLE_PER_CORE per core only
  where the kernel has no PSI (a run queue counts tasks that may not wait at all: a floodsub burst
  wakes 30 nodes at once on 2 cores, and the quickstart's run queue is above 1.5 per core in half
  its samples while its loop lag and probes stay in bounds; PSI says whether tasks did wait).

The run's verdict is that of the phases after T0 ("load" and "drain"), where every figure the
analysis reports is measured; "before T0" (deploy, start-up, calibration) is judged and shown, but
start-up is expected to load the host and calibration reports its own error. docs/analysis.md gives
the measurements behind each number.
May import: orchestrator.model.fault_actions (how each fault action is timed); nothing else of peerlab."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.model.fault_actions import ACTIONS

FAITHFUL, UNFAITHFUL, NOT_MEASURED = "faithful", "unfaithful", "not measured"
BEFORE_T0, LOAD, DRAIN = "before T0", "load", "drain"
PHASES = (BEFORE_T0, LOAD, DRAIN)
JUDGED = (LOAD, DRAIN)  # the phases the run's verdict is made of


@dataclass(frozen=True)
class Thresholds:
    rtt_error_share: float = 0.10
    rtt_error_ms: float = 2.0
    lag_ms: float = 20.0  # one of node.process.looplag.EDGES_MS (the nodes' histogram counts above it)
    lag_late_share: float = 0.05
    delayline_late_share: float = 0.01
    psi_some_pct: float = 50.0
    runnable_per_core: float = 1.5
    steal_share: float = 0.10
    host_share: float = 1 / 3
    fault_late_s: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


THRESHOLDS = Thresholds()


def rtt_ok(measured_ms: float, configured_ms: float, th: Thresholds = THRESHOLDS) -> bool:
    return abs(measured_ms - configured_ms) <= th.rtt_error_share * configured_ms + th.rtt_error_ms


def _pct(x: float) -> str:
    return f"{x:.0%}"


def reasons(fig: dict[str, Any], th: Thresholds = THRESHOLDS) -> list[str]:
    """Why a phase with figures `fig` is unfaithful (empty: it is faithful)."""
    out = []
    probes = fig.get("probes") or {}
    if probes.get("count") and probes["off_share"] > 0.5:
        out.append(f"{probes['off']} of {probes['count']} RTT probes off the plan by more than "
                   f"{_pct(th.rtt_error_share)} + {th.rtt_error_ms:g} ms (median error {probes['error_ms_median']:+.1f} ms)")
    lag = fig.get("loop_lag") or {}
    if lag.get("nodes") and lag["late_share"] > th.lag_late_share:
        out.append(f"node event loops late: {lag['late_share']:.1%} of {lag['samples']} ticks over {th.lag_ms:g} ms "
                   f"(> {_pct(th.lag_late_share)}; worst node's p99 {lag['p99_ms_worst']:.0f} ms at {lag['worst_node']})")
    dl = fig.get("delay_line") or {}
    if dl.get("packets") and dl["late_10ms_share"] >= th.delayline_late_share:
        out.append(f"delay line behind: {dl['late_10ms_share']:.1%} of {dl['packets']} packets 10 ms or more late "
                   f"(>= {th.delayline_late_share:.0%})")
    host = fig.get("host") or {}
    if host.get("samples"):
        over = host["over_share"]
        if over.get("psi") is not None and over["psi"] > th.host_share:
            out.append(f"CPU pressure (PSI some) above {th.psi_some_pct:g}% in {_pct(over['psi'])} of "
                       f"{host['samples']} samples")
        if over["runnable"] > th.host_share and over.get("psi") is None:
            out.append(f"run queue above {th.runnable_per_core:g} per core in {_pct(over['runnable'])} of "
                       f"{host['samples']} samples (max {host['runnable_per_core']['max']:.1f})")
        if over["steal"] > th.host_share:
            out.append(f"CPU steal above {_pct(th.steal_share)} in {_pct(over['steal'])} of {host['samples']} samples")
    return out


LINK_CHANGES = tuple(a.name for a in ACTIONS.values() if a.changes == "links")  # their effect is the links changed
TIMED_TO_EFFECT = tuple(a.name for a in ACTIONS.values() if a.lateness == "took effect")


def fault_lateness(executed: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each executed fault and how late it was, in seconds, as its row's `lateness` says
    (orchestrator/model/fault_actions.py): one that changes links (a partition, a node's degrade...)
    from its planned time to when it took effect (changing the links is part of it); a node's process
    action from its planned time to when it was issued (a restart then takes a process start, the
    node's own cost)."""
    out = []
    for rec in executed:
        took = rec["offset_s"]
        issued = took - (rec["t_ns"] - rec["issued_ns"]) / 1e9
        out.append((rec, (took if rec["action"] in TIMED_TO_EFFECT else issued) - rec["at"]))
    return out


def fault_reasons(executed: list[dict[str, Any]], th: Thresholds = THRESHOLDS) -> list[str]:
    """The fault timeline's reasons: a fault more than `fault_late_s` after its time (a partition
    applied late shortens it, and what the analysis counts during it)."""
    return [f"fault timeline: {rec['action']}{' ' + rec['node'] if rec.get('node') else ''} planned at "
            f"T0+{rec['at']:g}s came {late:.1f} s late (> {th.fault_late_s:g} s){_where_late(rec, late)}"
            for rec, late in fault_lateness(executed) if late > th.fault_late_s]


def when(offset_s: float | None) -> str:
    """When a node exited, from T0 (None: before T0 was fixed)."""
    return "before T0" if offset_s is None else f"at T0{'+' if offset_s >= 0 else ''}{offset_s:g}s"


def exit_reasons(exits: list[dict[str, Any]]) -> list[str]:
    """The run's reasons from its nodes that exited on their own (the manifest's `node_exits`)."""
    return [f"node {e['node']} exited on its own (exit code {'unknown' if e['code'] is None else e['code']}, "
            f"{when(e['offset_s'])}): the run does not measure the protocol as planned" for e in exits]


def _where_late(rec: dict[str, Any], late: float) -> str:
    """Of a link change's lateness, how much was spent before it began (the run's event loop, faults
    before it) and how much changing the links (the kernel's tc, contended or slow)."""
    if rec["action"] not in LINK_CHANGES:
        return ""
    changing = (rec["t_ns"] - rec["issued_ns"]) / 1e9
    return f": began {max(0.0, late - changing):.1f} s late, then {changing:.1f} s changing the links"


def measured(fig: dict[str, Any]) -> bool:
    return any((fig.get(k) or {}).get(n) for k, n in (("host", "samples"), ("loop_lag", "nodes"),
                                                     ("probes", "count"), ("delay_line", "packets")))


def judge_phase(fig: dict[str, Any], th: Thresholds = THRESHOLDS) -> dict[str, Any]:
    """The phase's verdict and reasons, beside its figures."""
    if not measured(fig):
        return {"verdict": NOT_MEASURED, "reasons": [], **fig}
    why = reasons(fig, th)
    return {"verdict": UNFAITHFUL if why else FAITHFUL, "reasons": why, **fig}


def overall(phases: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """The run's verdict from its judged phases, and the reasons (each prefixed with its phase)."""
    judged = [p for p in JUDGED if p in phases and phases[p]["verdict"] != NOT_MEASURED]
    if not judged:
        return NOT_MEASURED, ["nothing was sampled after T0"]
    why = [f"{p}: {r}" for p in judged for r in phases[p]["reasons"]]
    return (UNFAITHFUL if why else FAITHFUL), why


def line(verdict: str, why: list[str]) -> str:
    """The run's one line: `faithful` or `UNFAITHFUL: why`."""
    if verdict == UNFAITHFUL:
        return "UNFAITHFUL: " + "; ".join(why)
    return verdict + (f" ({'; '.join(why)})" if why else "")


def describe(th: Thresholds = THRESHOLDS) -> str:
    """The rule in one sentence, with its numbers (for the manifest and the report)."""
    return (f"a phase is unfaithful if more than half its RTT probes are off the plan by more than "
            f"{_pct(th.rtt_error_share)} + {th.rtt_error_ms:g} ms, or more than "
            f"{_pct(th.lag_late_share)} of the nodes' loop-lag ticks (all together) are over {th.lag_ms:g} ms, or {th.delayline_late_share:.0%} or more of the delay line's packets are "
            f"10 ms late, or in more than {_pct(th.host_share)} of the host samples CPU pressure (PSI some) is "
            f"above {th.psi_some_pct:g}%, runnable tasks above {th.runnable_per_core:g} per core or steal above "
            f"{_pct(th.steal_share)}; the run is unfaithful if its load or drain phase is, if a fault of its "
            f"timeline came more than {th.fault_late_s:g} s after its time, or if a node exited on its own "
            "before the drain's end")
