"""The fidelity section as text: one line per phase for the console, and the section for a run that
needs no sampling (the simulator's virtual time)."""
from __future__ import annotations

from typing import Any

from orchestrator.fidelity import rule


def _figures(phase: dict[str, Any]) -> list[str]:
    out = []
    h = phase.get("host") or {}
    if h.get("samples"):
        psi = h["psi_some_pct"]
        out.append(f"CPU busy p50 {h['cpu_busy_pct']['p50']:.0f}% max {h['cpu_busy_pct']['max']:.0f}%, "
                   f"run queue/core p50 {h['runnable_per_core']['p50']:.1f} max {h['runnable_per_core']['max']:.1f}, "
                   + (f"PSI some max {psi['max']:.0f}%" if isinstance(psi, dict) else "no PSI")
                   + (f", steal max {h['steal_pct']['max']:.0f}%" if h["steal_pct"]["max"] else ""))
    lag = phase.get("loop_lag") or {}
    if lag.get("nodes"):
        out.append(f"loop lag {lag['late_share']:.1%} of ticks over {rule.THRESHOLDS.lag_ms:g} ms (p95 <= {lag['p95_ms_pooled_le']} ms, p99 <= "
                   f"{lag['p99_ms_pooled_le']} ms over {lag['nodes']} nodes), max {lag['max_ms']:.0f} ms")
    if lag.get("not_measured"):
        out.append(f"loop lag not measured for {lag['not_measured'].split(' (')[0]}")
    p = phase.get("probes") or {}
    if p.get("count"):
        out.append(f"{p['count']} RTT probes, error median {p['error_pct_median']:.1f}% max {p['error_pct_max']:.1f}%")
    dl = phase.get("delay_line") or {}
    if dl.get("packets"):
        out.append(f"delay line {dl['late_10ms_share']:.2%} late")
    return out


def phase_line(phase: dict[str, Any]) -> str:
    head = phase["verdict"] if phase["verdict"] != rule.UNFAITHFUL else "UNFAITHFUL"
    return f"{head}: " + "; ".join(_figures(phase) or ["nothing sampled"])


VIRTUAL_TIME = "faithful by construction: virtual time"


def virtual_time() -> dict[str, Any]:
    """The simulator's section: no host can make its timing late."""
    return {"verdict": rule.FAITHFUL, "reasons": [], "line": VIRTUAL_TIME,
            "rule": "the simulator's clock is virtual: event times do not depend on the host's load", "phases": {}}
