"""What the commands share: the parser of one command with its examples, the error console and how text
from outside goes into its markup (`said`), scenario and Spark options, KEY=VALUE parsing, the analysis
of one run and its one-line summary."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from orchestrator import spark_on_k8s

err = Console(stderr=True, soft_wrap=True)


def said(text: object) -> str:
    """Text from outside (an exception's message, a path, a matrix label) for a line printed with Rich
    markup: its markup escaped (`[/]` is text, not a closing tag), control characters shown as escapes."""
    from orchestrator.model.bounded import shown

    return escape("\n".join(shown(line, 4000) for line in str(text).split("\n")))


class UsageError(Exception):
    pass


HELP_WIDTH = 100


def add_command(sub: argparse._SubParsersAction, name: str, *, help: str, description: str = "",
                examples: Sequence[str] = (), note: str = "") -> argparse.ArgumentParser:
    """One command's parser. Its --help shows the description (the help line if none), each paragraph
    (blank-line separated) filled to the width, then `examples:` one per line as written (aligned
    comments stay aligned), then the note."""
    text = "\n\n".join(textwrap.fill(" ".join(paragraph.split()), HELP_WIDTH)
                        for paragraph in (description or help).strip().split("\n\n"))
    epilog = "\n".join([*(["examples:", *(f"  {e}" for e in examples)] if examples else []),
                        *([textwrap.fill(note, HELP_WIDTH)] if note else [])])
    return sub.add_parser(name, help=help, description=text, epilog=epilog or None,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a field, e.g. --set nodes.count=10 (repeatable; values read as YAML)")
    p.add_argument("--matrix", dest="matrix", action="append", default=[], metavar="PATH=V1,V2,...",
                   help="one run per value (repeatable: the cartesian product), added to the scenario's "
                        "own matrix: block, e.g. --matrix gossipsub.variant=v1.1,v1.2")
    p.add_argument("--data-root", dest="data_roots", action="append", default=[], metavar="DIR",
                   help="a directory outside the scenario's own whose files its data paths (latency "
                        "matrices, WonderProxy CSVs, churn traces) may name (repeatable; also "
                        "PEERLAB_DATA_ROOTS=DIR:DIR). Relative data paths start at the scenario file's "
                        "directory, and nothing outside it and these roots is read")
    p.add_argument("--adapters", metavar="DIR", help="a folder of registered programs (an adapter.json each, as "
                                                      "`peerlab contract register --dir DIR` writes them) that "
                                                      "the scenario may name as interop:NAME; sets PEERLAB_ADAPTERS "
                                                      "(default ~/.config/peerlab/adapters)")


def load(args: argparse.Namespace):
    """The scenario's combinations (one, unless it or the command line has a matrix)."""
    from orchestrator.model.matrix import expand

    if getattr(args, "adapters", None):
        os.environ["PEERLAB_ADAPTERS"] = str(Path(args.adapters).resolve())
    return expand(args.scenario, args.overrides, args.matrix, args.data_roots)


def dilated(args: argparse.Namespace, combo: Any, k: float) -> Any:
    """One of `load`'s combinations again, dilated by `k` (validated as a --set of it would be)."""
    from orchestrator.model.matrix import Combination, expand

    (again,) = expand(args.scenario, [*args.overrides, *combo.overrides, f"dilation={k:g}"], [], args.data_roots)
    return Combination(combo.label, combo.overrides, again.scenario)


def key_values(items: list[str], option: str, example: str) -> dict[str, str]:
    """KEY=VALUE options (repeatable) as a dict; a usage error naming the option otherwise."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{option} {item!r}: write KEY=VALUE, e.g. {option} {example}")
        out[key] = value
    return out


def spark_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default="local[*]",
                   help="Spark master for the analysis: local[*] (default, this machine's cores), local[N], "
                        "or a cluster such as spark://host:7077 (see docs/analysis.md, 'At scale')")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting (repeatable), e.g. spark.executor.memory=8g, or the s3a settings "
                        "of docs/analysis.md")


class AnalysisInterrupted(RuntimeError):
    """SIGINT or SIGTERM during an analysis: Spark stopped, nothing of the run touched."""


def report(run_dir: Path, args: argparse.Namespace, remote: Any = None) -> dict[str, Any] | None:
    """The analysis of a run. A signal stops it within a second or two (AnalysisInterrupted): the
    handler kills Spark's JVM, so that every Spark call still to come fails at once, and interrupts
    the Python side too (an interrupt that lands in one of py4j's finalizers is lost; the JVM's end
    is not). The events table is rebuilt next time unless it was complete. `remote` (an
    analysis.ingest.RemoteRun): the logs are read in their object store through s3a; None (and why)
    if s3a's jars are not there."""
    conf = key_values(args.spark_conf, "--spark-conf", "spark.executor.memory=4g")
    if remote is not None:
        from analysis import s3a

        try:
            conf = {**s3a.conf(), **conf}
        except s3a.S3aUnavailable as e:
            err.print(f"[bold red]error:[/] {said(e)} (or report a local copy: --local-copy)", highlight=False)
            return None
    master, cluster = args.master, None
    if spark_on_k8s.wants_k8s(master):
        if remote is None:
            raise UsageError("--master k8s: the executors read the run from its object store; report it as "
                             "s3://BUCKET/PREFIX/RUN_ID (without --local-copy)")
        from orchestrator.backends.kube_cluster import settings

        opts = settings()
        try:
            cluster = spark_on_k8s.prepare(master, opts["namespace"], opts["context"],
                                           spark_on_k8s.with_s3a_jars_in_image(conf),
                                           lambda m: err.print(m, markup=False, highlight=False))
        except Exception as e:  # noqa: BLE001 - SparkOnK8sError, the API's errors, no cluster: one line
            err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
            return None
        master, conf = cluster.master, cluster.conf
        err.print(f"[bold cyan]analysis:[/] executors as pods of {said(cluster.image)} in namespace "
                  f"{said(cluster.namespace)} (label {spark_on_k8s.LABEL}={cluster.report_id})")
    try:
        return _analysis(run_dir, master, conf, remote, cluster)
    finally:
        if cluster is not None:
            _end_on_cluster(cluster)


def _end_on_cluster(cluster: Any) -> None:
    """The session stopped (which deletes its executors), then the report's Secret and any pod left;
    what cannot be removed is said, with the command that removes it."""
    from pyspark import SparkContext

    try:  # the process's one context (made in the session's starting thread: not this thread's "active" one)
        context = SparkContext._active_spark_context
        if context is not None:
            context.stop()  # before finish: a live driver would replace the executors finish deletes
    except Exception:  # noqa: BLE001 - a JVM that died or was killed: its executors are deleted below
        pass
    try:
        cluster.finish()
    except Exception as e:  # noqa: BLE001 - the analysis is done; what is left, `clean` removes
        err.print(f"[bold yellow]warning:[/] could not remove the report's Secret and executors ({said(e)}): "
                  f"`peerlab clean --kubernetes --namespace {cluster.namespace}` removes them", highlight=False)


def _analysis(run_dir: Path, master: str, conf: dict[str, str], remote: Any, cluster: Any) -> dict[str, Any]:
    """The analysis itself, on `master` with `conf`; signals stop it (report's docstring)."""
    from analysis.ingest import logs_bytes
    from analysis.spark import kill_jvm, start_session

    session = start_session(master, conf, remote.logs_bytes if remote else logs_bytes(run_dir))
    from analysis.job import analyse

    stopped = threading.Event()

    def interrupt(signum: int, frame: Any) -> None:
        if not stopped.is_set():
            stopped.set()
            logging.disable(logging.CRITICAL)  # py4j logs each failed call with a traceback
            kill_jvm()
            raise KeyboardInterrupt

    def handle_signals() -> dict[int, Any]:  # again once the session is up: PySpark sets its own SIGINT handler
        return {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}

    err.print(f"[bold cyan]analysis:[/] PySpark ({said(master)}) on {said(run_dir)}")
    previous = handle_signals()
    try:
        return analyse(run_dir, console=err, master=master, session=session, after_session=handle_signals,
                       remote=remote, where=cluster.executors if cluster else None)
    except BaseException:
        if not stopped.is_set():
            raise
        raise AnalysisInterrupted(f"the analysis of {run_dir} stopped, and Spark with it; the run is as it was: "
                                  f"`peerlab report {run_dir}` analyses it again") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        logging.disable(logging.NOTSET)


def close_analysis() -> None:
    """As the command ends: drop the connection to the analysis's JVM, if one was started (the JVM
    exits as this process does), so that exiting does not first tell the JVM, one call each, about
    the thousands of its objects Python still refers to (0.3 s after a quickstart report)."""
    if "analysis.spark" in sys.modules:
        sys.modules["analysis.spark"].close_gateway()


def summary(metrics: dict[str, Any], dilation: float = 1.0) -> str:
    """One line of a run's figures; a dilated run's say they are experiment time."""
    lat = metrics["latency_ms"]
    b = metrics["bytes"]

    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1f} ms"
    ratio = metrics["delivery_ratio"]
    return (f"delivery {'n/a' if ratio is None else f'{ratio:.4f}'} over {metrics['messages']} messages; "
            f"latency p50 {ms(lat['p50'])}, p99 {ms(lat['p99'])}; "
            f"sent {b['data_sent'] / 1e6:.2f} MB data, {b['control_sent'] / 1e6:.2f} MB control"
            + (f" (experiment time; dilated x{dilation:g})" if dilation != 1 else "")
            + ("; [bold red]no message reached a subscriber: the run does not measure the protocol[/] (nodes "
               "that exited, publishes refused, a wire no peer speaks: see the report's Faults)"
               if ratio == 0 and metrics["messages"] else ""))


def fidelity(manifest: dict[str, Any]) -> str:
    """The run's last console line: whether its timing can be trusted (orchestrator/fidelity)."""
    section = manifest.get("fidelity")
    if not section:
        return "[bold yellow]fidelity: not measured[/] (PEERLAB_FIDELITY=0, or a run from before the fidelity watch)"
    style = "bold red" if section["verdict"] == "unfaithful" else "bold green"
    return f"[{style}]fidelity:[/] {escape(section['line'])}"


def upload(store: Any, run_id: str) -> bool:
    """Put the run's new files (its analysis) in the store; False (and why, and the retry) if it failed."""
    from orchestrator.store import StoreError

    try:
        uploaded = store.sync(run_id)
    except StoreError as e:
        err.print(f"[bold red]store:[/] {said(e)}", highlight=False)
        return False
    if uploaded:
        err.print(f"uploaded {uploaded} files to {said(store.url)}/{said(run_id)}")
    return True


def write_json(obj: Any, output: str | None) -> None:
    """A JSON document (a schema) to `output`, or to stdout."""
    text = json.dumps(obj, indent=2)
    if output:
        Path(output).write_text(text + "\n")
        err.print(f"wrote {said(output)}")
    else:
        print(text)
