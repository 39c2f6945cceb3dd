"""report.html: one self-contained page per run (plots inlined as PNG, no network needed to view it)."""
from __future__ import annotations

import base64
import html
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis.fidelity import report_html  # noqa: E402


def png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def latency_cdf_plot(runs: dict[str, np.ndarray]) -> str:
    """The distribution of delivery latencies, one curve per run (label -> latencies in ms)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, latencies_ms in runs.items():
        if latencies_ms.size:
            xs = np.sort(latencies_ms)
            ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=label)
    ax.set_xlabel("propagation latency (ms)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_title("Latency CDF")
    ax.grid(alpha=0.3)
    if len(runs) > 1:
        ax.legend()
    return png(fig)


def series_plot(xs: list[float], series: dict[str, list[float | None]], xlabel: str, ylabel: str,
                title: str) -> str:
    """Several curves over the same x (missing points left out): per-epoch curves, run comparisons."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, ys in series.items():
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return png(fig)


def by_message(deliveries: Any) -> dict[str, tuple[int, np.ndarray]]:
    """coverage_plot's input from a pandas frame of deliveries (msg_id, latency_ms; NaN: never)."""
    return {m: (len(g), g["latency_ms"].dropna().to_numpy()) for m, g in deliveries.groupby("msg_id")}


def coverage_plot(runs: dict[str, dict[str, tuple[int, np.ndarray]]]) -> str:
    """Mean fraction of expected receivers reached against time since publication, one curve per run
    (label -> msg_id -> (expected receivers, latencies of those reached))."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    horizon = max((lat.max() for by_msg in runs.values() for _, lat in by_msg.values() if lat.size), default=1.0)
    grid = np.linspace(0, horizon * 1.05, 200)
    for label, by_msg in runs.items():
        curves = [np.searchsorted(np.sort(lat), grid, side="right") / expected
                  for expected, lat in by_msg.values() if expected]
        if curves:
            ax.plot(grid, np.mean(curves, axis=0), label=label)
    ax.set_xlabel("time since publication (ms)")
    ax.set_ylabel("mean coverage")
    ax.set_ylim(0, 1.05)
    ax.set_title("Coverage over time")
    ax.grid(alpha=0.3)
    if len(runs) > 1:
        ax.legend()
    return png(fig)


def bandwidth_plot(upload: Any, nodes: int, window: tuple[int, int] | None, t0_ns: int) -> str:
    """Mean upload per node each second since T0, data and control stacked; the publishing window
    (after warm-up, before drain) shaded. `upload`: a frame with columns second, data, control."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    if len(upload) and nodes:
        secs = upload["second"].to_numpy()
        data = upload["data"].fillna(0).to_numpy() * 8 / 1e6 / nodes
        control = upload["control"].fillna(0).to_numpy() * 8 / 1e6 / nodes
        ax.bar(secs, data, width=1.0, align="edge", label="data")
        ax.bar(secs, control, width=1.0, align="edge", bottom=data, label="control")
        ax.legend(loc="upper right")
    if window:
        ax.axvspan((window[0] - t0_ns) / 1e9, (window[1] - t0_ns) / 1e9, color="grey", alpha=0.12,
                   label="publishing window")
    ax.set_xlabel("seconds since T0")
    ax.set_ylabel("upload per node (Mbit/s)")
    ax.set_title("Bandwidth over time")
    ax.grid(alpha=0.3)
    return png(fig)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _flatten(section: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in section.items():
        name = f"{prefix}{key}"
        rows += _flatten(value, name + " ") if isinstance(value, dict) else [(name, value)]
    return rows


def _exit_row(e: dict[str, Any]) -> str:
    """A node's exit as the manifest records it (orchestrator/run/node_exits.py)."""
    code = "unknown" if e["code"] is None else e["code"]
    when = "before T0" if e["offset_s"] is None else f"at T0+{e['offset_s']:.4g}s"
    return (f"exit code {code} {when}; its last output: {' | '.join(e['last_lines']) or '(none)'} "
            f"({e['output']} in the run directory)")


def _faults_section(metrics: dict[str, Any], manifest: dict[str, Any]) -> str:
    """Accounting of planned publishes (with those an implementation refused), the fault timeline as
    executed, and each partition."""
    executed = manifest.get("faults_executed") or []
    acc = metrics.get("accounting") or {}
    refused = metrics.get("publishes_refused") or {}
    exits = manifest.get("node_exits") or []
    if not executed and not acc.get("publisher_down") and not refused and not exits:
        return ""
    counts: dict[str, int] = {}
    for f in executed:
        counts[f["action"]] = counts.get(f["action"], 0) + 1
    rows = [(f"publishes: {k.replace('_', ' ')}", v) for k, v in acc.items()]
    if refused:
        rows += [("publishes: refused by the implementation (not expected anywhere)", refused["count"])]
        rows += [(f"refused: {r['msg_id']} at {r['node']}", r["reason"]) for r in refused["first"]]
    rows += [("faults executed", ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none")]
    rows += [(f"{e['node']} exited on its own (not a fault of the timeline)", _exit_row(e)) for e in exits]
    parts = "".join(f"<h3>Partition at T0+{_fmt(p['at_s'])}s</h3>" + _table(list(p.items()))
                    for p in metrics.get("partitions") or [])
    return f"<h2>Faults</h2>{_table(rows)}{parts}"


def _applied(manifest: dict[str, Any]) -> str:
    note = (manifest.get("dilation") or {}).get("note")
    return f" ({note})" if note else ""


REPORT_ROWS = 200  # of gossipsub-interop's per-message table (metrics.json has every row)


def _dissemination_section(section: dict[str, Any] | None) -> str:
    """gossipsub-interop's per-message table (analysis/extras/dissemination.py), as their analysis.txt."""
    if not section:
        return ""
    shown = section["messages"][:REPORT_ROWS]
    rows = "".join(f"<tr><td>{html.escape(r['msg_id'])}</td><td>{_fmt(r['time_to_disseminate_s'])}</td>"
                   f"<td>{_fmt(r['p50_s'])}</td><td>{_fmt(r['avg_duplicates'])}</td><td>{_fmt(r['reach'])}</td></tr>"
                   for r in shown)
    if len(section["messages"]) > len(shown):
        rows += f"<tr><td colspan=5>... and {len(section['messages']) - len(shown)} more in metrics.json</td></tr>"
    means = section["mean"]
    return (f"<h2>gossipsub-interop view</h2><p>{html.escape(section['definition'])} ({section['skipped']} skipped). "
            f"Means: time to disseminate {_fmt(means['time_to_disseminate_s'])} s, p50 {_fmt(means['p50_s'])} s, "
            f"duplicates {_fmt(means['avg_duplicates'])}, reach {_fmt(means['reach'])}.</p>"
            "<table><tr><th>message</th><th>time to disseminate (s)</th><th>p50 to disseminate (s)</th>"
            f"<th>avg duplicate count</th><th>reach</th></tr>{rows}</table>")


def _implementations(manifest: dict[str, Any]) -> str:
    """Whose code ran the nodes, with how many each (`peerlab` for peerlab's own)."""
    counts: dict[str, int] = {}
    for node in manifest["plan"]["nodes"]:
        name = node.get("implementation") or "peerlab"
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} x{n}" for name, n in sorted(counts.items()))


def render(metrics: dict[str, Any], manifest: dict[str, Any], plots: dict[str, str]) -> str:
    lat = metrics["latency_ms"]
    cov = metrics["coverage_latency_ms"]
    shaping = metrics["shaping"]
    summary = [("scenario", manifest["scenario"]["name"]), ("run", manifest["run_id"]),
               ("backend", manifest.get("backend")), ("status", manifest.get("status")),
               ("protocol", manifest["plan"]["protocol"]), ("implementations", _implementations(manifest)),
               ("nodes", metrics["nodes"]), ("messages", metrics["messages"]), ("delivery ratio", metrics["delivery_ratio"]),
               ("delivery ratio among nodes up", metrics.get("delivery_ratio_up")),
               ("latency p50 / p90 / p99 (ms)", f"{_fmt(lat['p50'])} / {_fmt(lat['p90'])} / {_fmt(lat['p99'])}"),
               ("latency mean / max (ms)", f"{_fmt(lat['mean'])} / {_fmt(lat['max'])}"),
               ("coverage L15 / L50 / L90 / L100 (ms)",
                " / ".join(_fmt(cov[k]) for k in ("L15", "L50", "L90", "L100"))),
               ("duplicates per node", metrics["duplicates_per_node"]),
               ("data bytes sent", metrics["bytes"]["data_sent"]),
               ("control bytes sent", metrics["bytes"]["control_sent"])]
    dilation = (manifest.get("dilation") or {}).get("factor", 1)
    if dilation != 1:
        k = _fmt(dilation)
        summary.insert(5, ("time dilation", f"x{k}: ran {k} times slower than real time (latencies and timers x{k}, "
                                            f"bandwidths /{k}: docs/dilation.md); every time here is experiment "
                                            "time" + _applied(manifest)))
    left = metrics.get("ingest") or {}
    if left.get("logs_missing"):
        summary.append(("partial: no log from", f"{len(left['logs_missing'])} of {metrics['nodes']} nodes ("
                        + ", ".join(left["logs_missing"]) + "): the figures are those of the logs there are"))
    if left.get("dropped_lines"):
        summary.append(("log lines left out", f"{left['dropped_lines']}: " + "; ".join(
            f"{x['log']} line {x['line']} ({x['problem']})" for x in left["lines"])))
    shaping_rows = [("mode", shaping["mode"]), ("latency error (mean %)", shaping["latency_error_pct"]),
                    ("bandwidth error (mean %)", shaping["bandwidth_error_pct"]),
                    ("how", manifest.get("shaping", {}).get("latency", ""))]
    cal = manifest.get("calibration") or {}
    cal_rows = "".join(
        f"<tr><td>{r['a']} &harr; {r['b']}</td><td>{_fmt(r['configured_ms'])} ms</td><td>{_fmt(r['measured_ms'])} ms</td>"
        f"<td>{_fmt(r['error_pct'])}%</td></tr>" for r in cal.get("rtt", []))
    cal_rows += "".join(
        f"<tr><td>{r['from']} &rarr; {r['to']}</td><td>{_fmt(r['configured_mbit'])} Mbit/s</td>"
        f"<td>{_fmt(r['measured_mbit'])} Mbit/s</td><td>{_fmt(r['error_pct'])}%</td></tr>"
        for r in cal.get("throughput", []))
    faults_html = _faults_section(metrics, manifest)
    spent = {k: metrics[k] for k in ("bandwidth", "control", "connections", "resources") if metrics.get(k)}
    spent_html = f"<h2>Traffic, connections and resources</h2>{_table(_flatten(spent))}" if spent else ""
    views = {k: metrics[k] for k in ("per_topic", "per_subscriber") if metrics.get(k)}
    views_html = f"<h2>Per topic and per subscriber</h2>{_table(_flatten(views))}" if views else ""
    attack_html = (f"<h2>Attack impact: victims against the others</h2>{_table(_flatten(metrics['attack']))}"
                   if metrics.get("attack") else "")
    protocol = _flatten({k: v for k, v in (metrics.get("protocol") or {}).items() if k != "dissemination"})
    interop_html = _dissemination_section((metrics.get("protocol") or {}).get("dissemination"))
    protocol_html = f"<h2>Protocol: {html.escape(manifest['plan']['protocol'])}</h2>{_table(protocol)}" if protocol else ""
    images = "".join(f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}"></figure>'
                     for name, data in plots.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>peerlab report: {html.escape(manifest['run_id'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
th, td {{ text-align: left; padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; }}
figure {{ display: inline-block; margin: 0.5em; }}
.fidelity {{ padding: 0.5em 0.8em; border-left: 0.4em solid #999; background: #f4f4f4; }}
.fidelity.faithful {{ border-color: #2a2; }}
.fidelity.unfaithful {{ border-color: #c22; background: #fbeaea; }}
</style></head><body>
<h1>peerlab run {html.escape(manifest['run_id'])}</h1>
{report_html(manifest)}
<h2>Summary</h2>{_table(summary)}
<h2>Plots</h2>{images}
{views_html}
{attack_html}
{faults_html}
{spent_html}
{protocol_html}
{interop_html}
<h2>Shaping and calibration</h2>{_table(shaping_rows)}
<table><tr><th>link</th><th>configured</th><th>measured</th><th>error</th></tr>{cal_rows}</table>
</body></html>
"""
