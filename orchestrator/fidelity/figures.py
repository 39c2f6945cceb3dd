"""A phase's figures from what was sampled during it: host samples (orchestrator/fidelity/host.py),
the nodes' loop-lag windows (node/process/looplag.py), the delay line's lateness histogram over the phase,
and the RTT probes. Pure functions; the rule (orchestrator/fidelity/rule.py) reads their output."""
from __future__ import annotations

import statistics
from typing import Any, Sequence

from node.process.looplag import EDGES_MS
from orchestrator.fidelity.host import Sample
from orchestrator.fidelity.rule import THRESHOLDS, Thresholds, rtt_ok

LATE_10MS = ("<20", ">=20")  # the delay line's histogram bins of packets 10 ms or more late


def _spread(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> dict[str, float]:
    return {"p50": round(statistics.median(values) * scale, digits), "max": round(max(values) * scale, digits)}


def host_figures(samples: Sequence[Sample], th: Thresholds = THRESHOLDS) -> dict[str, Any]:
    if not samples:
        return {"samples": 0}
    n = len(samples)
    psi = [s.psi_some_pct for s in samples if s.psi_some_pct is not None]
    avg10 = [s.psi_some_avg10 for s in samples if s.psi_some_avg10 is not None]
    return {
        "samples": n,
        "cpu_busy_pct": {**_spread([s.busy for s in samples], 100, 1),  # the mean: CPU time used (admission's bench)
                         "mean": round(statistics.fmean(s.busy for s in samples) * 100, 1)},
        "steal_pct": _spread([s.steal for s in samples], 100, 1),
        "runnable_per_core": _spread([s.runnable_per_core for s in samples]),
        "psi_some_pct": _spread(psi, 1, 1) if psi else "no PSI",
        "psi_some_avg10_max": max(avg10) if avg10 else "no PSI",
        "over_share": {
            "psi": round(sum(p > th.psi_some_pct for p in psi) / len(psi), 3) if psi else None,
            "runnable": round(sum(s.runnable_per_core > th.runnable_per_core for s in samples) / n, 3),
            "steal": round(sum(s.steal > th.steal_share for s in samples) / n, 3),
        },
    }


def _pooled_quantile(hist: list[int], q: float) -> float | str:
    """The histogram edge (node.process.looplag.EDGES_MS) at or under which a share `q` of the ticks fall."""
    below = 0
    for edge, count in zip(EDGES_MS, hist):
        below += count
        if below >= q * sum(hist):
            return edge
    return f"> {EDGES_MS[-1]}"


def lag_figures(windows: dict[str, dict[str, Any]], not_measured: Sequence[str],
                th: Thresholds = THRESHOLDS) -> dict[str, Any]:
    """`windows`: node -> its GET /loop_lag answer for the phase; `not_measured`: nodes that have no
    such figure (an adapter's nodes). The nodes' histograms are added up: the pooled p95 and p99 (as
    the histogram's edge they fall under) and the share of ticks later than the rule's threshold."""
    seen = {n: w for n, w in windows.items() if w.get("samples")}
    out: dict[str, Any] = {"nodes": len(seen)}
    if not_measured:
        out["not_measured"] = f"{len(not_measured)} nodes (no loop-lag figure from their implementation)"
    if seen:
        worst = max(seen, key=lambda n: seen[n]["p99_ms"])
        pooled = [sum(counts) for counts in zip(*(w["hist"] for w in seen.values()))]
        total = sum(pooled)
        late = sum(pooled[EDGES_MS.index(th.lag_ms) + 1:])
        out.update(samples=total, tick_ms=next(iter(seen.values()))["tick_ms"],
                   hist={f"<={e}": c for e, c in zip(EDGES_MS, pooled)} | {f">{EDGES_MS[-1]}": pooled[-1]},
                   p95_ms_pooled_le=_pooled_quantile(pooled, 0.95), p99_ms_pooled_le=_pooled_quantile(pooled, 0.99),
                   late_share=round(late / total, 4),
                   p99_ms_worst=seen[worst]["p99_ms"], worst_node=worst,
                   p99_ms_median=round(statistics.median(w["p99_ms"] for w in seen.values()), 3),
                   max_ms=max(w["max_ms"] for w in seen.values()))
    return out


def delay_line_figures(late_ms: dict[str, int] | None) -> dict[str, Any] | None:
    """`late_ms`: the delay line's lateness histogram's growth over the phase (None: no delay line)."""
    if late_ms is None:
        return None
    total = sum(late_ms.values())
    late = sum(late_ms.get(b, 0) for b in LATE_10MS)
    return {"packets": total, "late_10ms_share": round(late / total, 4) if total else 0.0, "late_ms": late_ms}


def probe_figures(probes: Sequence[dict[str, Any]], th: Thresholds = THRESHOLDS) -> dict[str, Any]:
    """`probes`: {a, b, configured_ms, measured_ms} each (measured: the median of its pings)."""
    if not probes:
        return {"count": 0}
    errors = [p["measured_ms"] - p["configured_ms"] for p in probes]
    pcts = [abs(e) / p["configured_ms"] * 100 if p["configured_ms"] else 0.0 for e, p in zip(errors, probes)]
    off = sum(not rtt_ok(p["measured_ms"], p["configured_ms"], th) for p in probes)
    return {"count": len(probes), "off": off, "off_share": round(off / len(probes), 3),
            "error_ms_median": round(statistics.median(errors), 2), "error_ms_max": round(max(errors, key=abs), 2),
            "error_pct_median": round(statistics.median(pcts), 2), "error_pct_max": round(max(pcts), 2),
            "pairs": sorted({f"{p['a']}-{p['b']}" for p in probes})}


def delta(after: dict[str, int], before: dict[str, int] | None) -> dict[str, int]:
    return {k: v - (before or {}).get(k, 0) for k, v in after.items()}
