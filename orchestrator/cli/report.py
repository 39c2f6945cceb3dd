"""The analysis of stored runs: `report` (re-run it), `compare` (runs side by side)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from orchestrator.cli.common import UsageError, add_command, err, fidelity, report, said, spark_options, summary, upload


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "report", help="(re)run the analysis of a run directory",
                    description="Analyse a run: a local run directory, or a run in an s3:// store. An s3:// "
                                "run is read where it lies: its logs checked against the ETags its manifest "
                                "recorded, then read by Spark through s3a, the tables written beside them, "
                                "metrics.json and report.html put back (only the manifest comes to the cache, "
                                "$PEERLAB_CACHE or ~/.cache/peerlab). --local-copy fetches the whole run into "
                                "the cache instead, checks every file's sha256 and analyses it there.",
                    examples=["peerlab report runs/20261121-120000-quickstart-1a2b3c",
                              "peerlab report s3://bucket/peerlab/20261121-120000-quickstart-1a2b3c",
                              "peerlab report s3://bucket/peerlab/20261121-120000-quickstart-1a2b3c --local-copy",
                              "peerlab report runs/20261121-120000-quickstart-1a2b3c --master local[2]"])
    p.add_argument("run_dir", metavar="RUN", help="a run directory, or s3://BUCKET/PREFIX/RUN_ID")
    p.add_argument("--local-copy", action="store_true",
                   help="for an s3:// run: fetch it into the cache and analyse the copy (Spark without s3a)")
    spark_options(p)
    p.set_defaults(func=cmd_report)

    p = add_command(sub, "compare", help="metrics of several runs side by side",
                    examples=["peerlab compare runs/A runs/B", "peerlab compare runs/A runs/B --format csv",
                              "peerlab compare runs/A runs/B --html compare.html   # with the runs' curves"])
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained page with the table and the runs' "
                                                "curves overlaid: latency CDF, coverage and upload over time, and "
                                                "per-epoch curves (overlay protocols: receive rate, delay, victim "
                                                "topic, attackers' slot share)")
    p.set_defaults(func=cmd_compare)


def cmd_report(args: argparse.Namespace) -> int:
    store = remote = None
    if "://" in args.run_dir and not args.run_dir.startswith("file://"):
        from orchestrator.model.sections import refuse_credentials
        from orchestrator.store import StoreError, split_run_url

        try:
            refuse_credentials(args.run_dir)
            store, run_id = split_run_url(args.run_dir)
            if args.local_copy:
                err.print(f"fetching {said(args.run_dir)} into {said(store.root)}")
                run_dir = store.fetch(run_id)
            else:
                from analysis.ingest import RemoteRun

                opened = store.open_in_place(run_id)
                run_dir, size = opened.local, sum(opened.log_sizes.values())
                remote = RemoteRun(opened.url, size, tuple(opened.nodes), opened.log_sizes, opened.table_stamp)
                err.print(f"reading {said(args.run_dir)} in place through s3a ({size / 1e6:.1f} MB of logs"
                          + (", compacted into Parquet)" if remote.table_current(json.loads(
                              (run_dir / "manifest.json").read_text())) else ")"))
        except (ValueError, FileNotFoundError) as e:
            raise UsageError(str(e)) from None
        except StoreError as e:
            err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
            return 1
    else:
        run_dir = Path(args.run_dir.removeprefix("file://"))
    if not (run_dir / "manifest.json").exists():
        raise UsageError(f"{run_dir}: not a run directory (no manifest.json)")
    metrics = report(run_dir, args, remote)
    if metrics is None:
        return 1
    if store is not None and not upload(store, run_id):
        return 1
    manifest = json.loads((run_dir / "manifest.json").read_text())
    dilation = (manifest.get("dilation") or {}).get("factor", 1)
    driver = json.loads((run_dir / "analysis" / "timings.json").read_text()).get("driver") or {}
    if driver:
        err.print(f"analysis: the driver's peak memory: JVM {driver.get('jvm_peak_rss_mib', '?')} MiB resident "
                  f"(heap at most {driver['jvm_heap_max_mib']:.0f} MiB), Python {driver['python_peak_rss_mib']} MiB")
    err.print(f"[bold green]summary:[/] {summary(metrics, dilation)}")
    err.print(fidelity(manifest))
    print(run_dir / "analysis" / "report.html")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import distribution_plots, epoch_plots, load_rows, render_csv, render_html, render_table
    from analysis.fidelity import compare_warnings

    try:
        rows = load_rows(args.run_dirs)
    except FileNotFoundError as e:
        raise UsageError(str(e))
    if args.html:
        plots = {**distribution_plots(args.run_dirs), **epoch_plots(args.run_dirs)}
        Path(args.html).write_text(render_html(rows, plots))
        err.print(f"wrote {args.html} ({len(plots)} overlaid plots)")
    if args.format == "json":
        print(json.dumps(rows, indent=1))
    elif args.format == "csv":
        print(render_csv(rows), end="")
    else:
        print(render_table(rows))
    for warning in compare_warnings(rows):  # on the console too, whatever the format
        err.print(warning, style="bold red", markup=False, highlight=False)
    return 0
