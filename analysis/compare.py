"""`peerlab compare RUN_DIR...`: the runs' metrics side by side (table, CSV or JSON).

Reads each run's analysis/metrics.json and manifest.json; run `peerlab report` first on a run that
has no analysis yet.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from analysis.extras import EXTRAS
from analysis.fidelity import compare_warnings

COLUMNS = [  # (header, how to get it from (metrics, manifest))
    ("run", lambda m, man: man["run_id"]),
    ("label", lambda m, man: man.get("label") or ""),
    ("protocol", lambda m, man: man["plan"]["protocol"]),
    ("implementation", lambda m, man: "+".join(sorted({n.get("implementation", "peerlab") for n in man["plan"]["nodes"]}))),
    ("topology", lambda m, man: _topology(man)),
    ("nodes", lambda m, man: m["nodes"]),
    ("edges", lambda m, man: sum(len(n["dial"]) for n in man["plan"]["nodes"])),
    ("messages", lambda m, man: m["messages"]),
    ("delivery", lambda m, man: m["delivery_ratio"]),
    ("delivery_up", lambda m, man: m.get("delivery_ratio_up")),
    ("p50_ms", lambda m, man: m["latency_ms"]["p50"]),
    ("p90_ms", lambda m, man: m["latency_ms"]["p90"]),
    ("p99_ms", lambda m, man: m["latency_ms"]["p99"]),
    ("L50_ms", lambda m, man: m["coverage_latency_ms"]["L50"]),
    ("L100_ms", lambda m, man: m["coverage_latency_ms"]["L100"]),
    ("dup_per_node", lambda m, man: m["duplicates_per_node"]),
    ("worst_subscriber", lambda m, man: (m.get("per_subscriber") or {}).get("delivery_ratio", {}).get("min")),
    ("mbit_per_node", lambda m, man: (m.get("bandwidth") or {}).get("mean_mbit_per_node")),
    ("cpu_share", lambda m, man: (m.get("resources") or {}).get("cpu_share_mean")),
    ("rss_peak_MB", lambda m, man: (m.get("resources") or {}).get("rss_peak_mb_max")),
    ("data_MB", lambda m, man: m["bytes"]["data_sent"] / 1e6),
    ("control_MB", lambda m, man: m["bytes"]["control_sent"] / 1e6),
    ("kernel_sent_MB", lambda m, man: (m.get("kernel_traffic") or {}).get("sent_bytes", 0) / 1e6 or None),
    ("kernel/logged", lambda m, man: (m.get("kernel_traffic") or {}).get("kernel_over_logged")),
    ("mesh_mean", lambda m, man: (m.get("mesh") or {}).get("mean_at_delivery")),
    ("forwards_per_delivery", lambda m, man: (m.get("relaying") or {}).get("forwards_per_delivery")),
    ("first_forward_ms", lambda m, man: ((m.get("relaying") or {}).get("first_forward_ms") or {}).get("p50")),
    ("last_forward_ms", lambda m, man: ((m.get("relaying") or {}).get("last_forward_ms") or {}).get("p50")),
    ("shaping", lambda m, man: m["shaping"]["mode"]),
    ("fidelity", lambda m, man: (man.get("fidelity") or {}).get("verdict")),  # analysis/fidelity.py
]


def _topology(manifest: dict[str, Any]) -> str:
    topo = manifest["scenario"]["topology"]
    name = manifest["plan"].get("topology") or topo.get("algorithm") or "complete"
    return name + (f" (edges of {topo['edges_of']})" if topo.get("edges_of") else "")


def load_rows(run_dirs: list[str | Path]) -> list[dict[str, Any]]:
    rows = []
    for run_dir in map(Path, run_dirs):
        metrics_path = run_dir / "analysis" / "metrics.json"
        if not metrics_path.exists():
            raise FileNotFoundError(f"{run_dir}: no analysis/metrics.json (run `peerlab report {run_dir}` first)")
        metrics = json.loads(metrics_path.read_text())
        manifest = json.loads((run_dir / "manifest.json").read_text())
        rows.append({name: get(metrics, manifest) for name, get in COLUMNS})
        rows[-1]["_extra"] = _extra_cells(metrics, manifest)
    # the protocols' own columns after the common ones; a run of another protocol shows n/a there
    extra_names = list(dict.fromkeys(name for row in rows for name in row["_extra"]))
    for row in rows:
        extra = row.pop("_extra")
        row.update({name: extra.get(name) for name in extra_names})
    return rows


def _extra_cells(metrics: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    extra = EXTRAS.get(manifest["plan"]["protocol"])
    section = metrics.get("protocol")
    if not extra or not section:
        return {}
    return {name: get(section) for name, get in extra.columns}


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_table(rows: list[dict[str, Any]]) -> str:
    """One line per metric, one column per run (runs are few, metrics many)."""
    names = list(rows[0]) if rows else [name for name, _ in COLUMNS]
    width = max(len(n) for n in names)
    cols = [[_cell(r[n]) for n in names] for r in rows]
    widths = [max(len(c) for c in col) for col in cols]
    lines = []
    for i, name in enumerate(names):
        lines.append(f"{name:<{width}}  " + "  ".join(f"{col[i]:>{w}}" for col, w in zip(cols, widths)))
    return "\n".join(lines + compare_warnings(rows))


def render_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else [n for n, _ in COLUMNS])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


CURVES = (("receive_rate", "interested-message receive rate"), ("delay_ms", "average propagation delay (ms)"),
          ("victim_receive_rate", "victim-topic receive rate"), ("attacker_slot_share",
                                                                 "attackers' share of honest outgoing slots"))


def epoch_plots(run_dirs: list[str | Path]) -> dict[str, str]:
    """The runs' per-epoch curves overlaid, one plot per measure (the Topiary seed's Figures 3-5);
    runs without per-epoch data are left out."""
    from analysis.report import series_plot

    runs = []
    for run_dir in map(Path, run_dirs):
        metrics = json.loads((run_dir / "analysis" / "metrics.json").read_text())
        manifest = json.loads((run_dir / "manifest.json").read_text())
        per_epoch = (metrics.get("protocol") or {}).get("per_epoch")
        if per_epoch:
            runs.append((manifest.get("label") or manifest["plan"]["protocol"], per_epoch))
    plots = {}
    for key, label in CURVES:
        series = {name: pe[key] for name, pe in runs if key in pe}
        if series:
            xs = list(range(max(len(v) for v in series.values())))
            plots[label] = series_plot(xs, series, "epoch", label, label[0].upper() + label[1:])
    return plots


def _label(manifest: dict[str, Any]) -> str:
    return manifest.get("label") or manifest["run_id"]


def _table(run_dir: Path, name: str, columns: list[str]) -> Any:
    """A run's analysis table as pandas (None if the run's analysis predates it)."""
    import pyarrow.dataset as ds

    path = run_dir / "analysis" / "tables" / name
    if not path.is_dir():
        return None
    return ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=columns).to_pandas()


def distribution_plots(run_dirs: list[str | Path]) -> dict[str, str]:
    """Every run's latency CDF, coverage over time and upload per node over time, overlaid (read
    from the Parquet tables `peerlab report` wrote; runs without them are left out)."""
    from analysis.report import by_message, coverage_plot, latency_cdf_plot, series_plot

    latencies, coverage, upload = {}, {}, {}
    for run_dir in map(Path, run_dirs):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        label = _label(manifest)
        dl = _table(run_dir, "deliveries", ["msg_id", "latency_ms"])
        if dl is not None:
            latencies[label] = dl["latency_ms"].dropna().to_numpy()
            coverage[label] = by_message(dl)
        bw = _table(run_dir, "bandwidth", ["second", "bytes"])
        if bw is not None and len(bw):
            per_s = bw.groupby("second")["bytes"].sum() * 8 / 1e6 / len(manifest["plan"]["nodes"])
            upload[label] = dict(zip(per_s.index.tolist(), per_s.tolist()))
    plots = {}
    if latencies:
        plots["latency CDF"] = latency_cdf_plot(latencies)
        plots["coverage over time"] = coverage_plot(coverage)
    if upload:
        xs = sorted({x for series in upload.values() for x in series})
        plots["upload per node over time"] = series_plot(
            xs, {k: [v.get(x) for x in xs] for k, v in upload.items()}, "seconds since T0",
            "upload per node (Mbit/s)", "Bandwidth over time")
    return plots


def render_html(rows: list[dict[str, Any]], plots: dict[str, str]) -> str:
    """A self-contained page: the comparison table and the overlaid plots (no network needed)."""
    import html as H

    names = list(rows[0]) if rows else []
    head = "".join(f"<th>{H.escape(str(r['label'] or r['protocol']))}</th>" for r in rows)
    body = "".join(f"<tr><td>{H.escape(n)}</td>" + "".join(f"<td>{H.escape(_cell(r[n]))}</td>" for r in rows)
                   + "</tr>" for n in names)
    images = "".join(f"<h2>{H.escape(t)}</h2><img alt='{H.escape(t)}' src='data:image/png;base64,{png}'>"
                     for t, png in plots.items())
    warnings = "".join(f"<p class='warning'>{H.escape(w)}</p>" for w in compare_warnings(rows))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>peerlab compare</title><style>"
            "body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}"
            "td:first-child{text-align:left}.warning{color:#b00;font-weight:bold}</style></head><body>"
            f"<h1>peerlab compare</h1>{warnings}<table><tr><th></th>{head}</tr>{body}</table>{images}</body></html>\n")
