"""The run's fidelity verdict, as the runner judged it (the manifest's `fidelity` section, written by
orchestrator/fidelity): into metrics.json, at the top of report.html, and into `peerlab compare`'s
warnings. A run from before the fidelity watch, or run with PEERLAB_FIDELITY=0, has none.

Pure functions of the manifest's section: the metrics.json section made of it is registered in
analysis/catalogue.py. May import: nothing of analysis; never registry, run_data or catalogue."""
from __future__ import annotations

import html
from typing import Any

UNFAITHFUL = "unfaithful"


def verdict(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """metrics.json's `fidelity` section: the verdict, its line, its reasons and each phase's verdict;
    None for a run without one."""
    section = manifest.get("fidelity")
    if not section:
        return None
    return {"verdict": section["verdict"], "line": section["line"], "reasons": section["reasons"],
            "phases": {name: phase["verdict"] for name, phase in section.get("phases", {}).items()}}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return " / ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in value.values())
    return f"{value:.3g}" if isinstance(value, float) else str(value)


ROWS = (  # (row, how to get it from a phase's figures)
    ("verdict", lambda p: p["verdict"]),
    ("host samples", lambda p: p["host"].get("samples") or p["host"].get("note")),
    ("CPU busy % p50 / max / mean", lambda p: p["host"].get("cpu_busy_pct")),
    ("run queue per core p50 / max", lambda p: p["host"].get("runnable_per_core")),
    ("PSI some % (1 s) p50 / max", lambda p: p["host"].get("psi_some_pct")),
    ("PSI some avg10 max %", lambda p: p["host"].get("psi_some_avg10_max")),
    ("steal % p50 / max", lambda p: p["host"].get("steal_pct")),
    ("loop lag: share of ticks over the threshold", lambda p: p["loop_lag"].get("late_share")),
    ("loop lag p95 / p99 ms, all nodes' ticks (at most)",
     lambda p: {k: p["loop_lag"][k] for k in ("p95_ms_pooled_le", "p99_ms_pooled_le")} if p["loop_lag"].get("samples")
     else None),
    ("loop lag p99 ms: worst node", lambda p: p["loop_lag"].get("p99_ms_worst")),
    ("loop lag p99 ms: median node", lambda p: p["loop_lag"].get("p99_ms_median")),
    ("loop lag max ms", lambda p: p["loop_lag"].get("max_ms")),
    ("loop lag not measured", lambda p: p["loop_lag"].get("not_measured")),
    ("delay line: share 10 ms late", lambda p: (p.get("delay_line") or {}).get("late_10ms_share")),
    ("RTT probes", lambda p: p["probes"].get("count")),
    ("RTT error % median / max", lambda p: {k: p["probes"][k] for k in ("error_pct_median", "error_pct_max")}
     if p["probes"].get("count") else None),
)


def report_html(manifest: dict[str, Any]) -> str:
    """The verdict (a banner) and each phase's figures, for the top of report.html."""
    section = manifest.get("fidelity")
    if not section:
        return ("<p class='fidelity'><b>Fidelity: not measured</b> (a run from before the fidelity watch, "
                "or run with PEERLAB_FIDELITY=0)</p>")
    bad = section["verdict"] == UNFAITHFUL
    banner = (f"<p class='fidelity {'unfaithful' if bad else 'faithful'}'><b>Fidelity: "
              f"{'UNFAITHFUL' if bad else html.escape(section['verdict'])}</b>")
    banner += ("".join(f"<br>{html.escape(r)}" for r in section["reasons"]) if bad
               else f" ({html.escape(section['line'])})") + "</p>"
    phases = section.get("phases") or {}
    if not phases:
        return banner
    head = "".join(f"<th>{html.escape(name)}</th>" for name in phases)
    cells = [(row, [_cell(get(p)) for p in phases.values()]) for row, get in ROWS]
    body = "".join(f"<tr><th>{html.escape(row)}</th>" + "".join(f"<td>{html.escape(c)}</td>" for c in values)
                   + "</tr>" for row, values in cells if any(values))  # rows with no figure left out
    rule = f"<p class='rule'>Rule: {html.escape(section.get('rule', ''))}.</p>"
    return f"{banner}<table><tr><th>phase</th>{head}</tr>{body}</table>{rule}"


def compare_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """A warning for each compared run whose timing was judged unfaithful (`peerlab compare`)."""
    return [f"warning: run {r['run']} is UNFAITHFUL: the host or its nodes ran late during it, so its "
            "latencies are not the protocol's alone (its report.html says why)"
            for r in rows if r.get("fidelity") == UNFAITHFUL]
