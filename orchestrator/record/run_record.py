"""What every run leaves in the store, whatever executed it (emulation or simulation): its id, the
manifest (scenario, plan, versions, backend, status), the `status` file, progress lines, and the
event logs collected as events/<node>.jsonl.gz.

A disk that fills while the logs are stored stops the storing, not the ending: what was stored stays
(the log being written is cut short there, which the analysis reads up to the cut), and the space a
run needs to say how it ended (manifest and status) is held back from the start (`.reserve`)."""
from __future__ import annotations

import json
import platform
import secrets
import shutil
import threading
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.model.plan import RunPlan
from orchestrator.model.scenario import Scenario
from orchestrator.record.host_state import mark_status
from orchestrator.store import DISK_FULL, Store, StoreError, open_store


class RunError(RuntimeError):
    """A run that could not go on; the message names the node and shows its last output."""


class RunInterrupted(RuntimeError):
    """SIGINT or SIGTERM stopped the run; everything was torn down."""


RESERVE = ".reserve"


def new_run_id(name: str) -> tuple[str, str]:
    short = secrets.token_hex(3)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{name}-{short}", short


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "kernel": platform.release()}
    for dist in ("peerlab", "pyroute2", "aiohttp", "protobuf", "pyspark"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


class RunRecord:
    """Plan, run id, run directory and manifest of one run; subclasses execute it. The plan is the
    caller's (orchestrator/model/plan.py's `make_plan`), made once the run was admitted."""

    def __init__(self, scenario: Scenario, plan: RunPlan, *, backend: str, console: Console | None = None,
                 label: str = ""):
        self.scenario = scenario
        self.label = label
        self.plan = plan
        self.console = console or Console(stderr=True, soft_wrap=True)
        self.store: Store = open_store(scenario.output.store)
        self.run_id, self.short = new_run_id(scenario.name)
        self.run_dir = self.store.run_dir(self.run_id)
        self.manifest: dict[str, Any] = {
            "run_id": self.run_id, "label": label, "backend": backend, "status": "running",
            "started_at": datetime.now(timezone.utc).isoformat(), "versions": _versions(),
            "scenario": scenario.model_dump(mode="json"), "plan": self.plan.model_dump(mode="json"),
            "faults_executed": [],
        }
        self.disk_full = ""  # what a full disk kept from being stored (store_safely)
        self.stored: set[str] = set()  # nodes whose complete log was stored as they stopped (store_log)

    def step(self, text: str) -> None:
        self.console.print(f"[bold cyan]{time.strftime('%H:%M:%S')}[/] {text}")

    def warn(self, text: str) -> None:
        self.console.print(f"[bold yellow]warning:[/] {text}")

    def begin(self) -> None:
        self.store.write_json(self.run_id, "manifest.json", self.manifest)
        mark_status(str(self.run_dir), "running")
        # room for the final manifest (written beside the old one, then renamed) and the status
        size = (self.run_dir / "manifest.json").stat().st_size
        (self.run_dir / RESERVE).write_bytes(bytes(size + 256 * 1024))

    def store_safely(self, what: str, store: Any, *args: Any) -> bool:
        """`store(*args)`; on a full disk, False and `disk_full` says what could not be stored."""
        try:
            store(*args)
            return True
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            self.disk_full = self.disk_full or f"disk full while storing {what} in {self.run_dir}"
            return False

    def store_log(self, node_id: str, path: Path) -> None:
        """Store the log of a node that stopped for good, now rather than at the end: a run killed
        during teardown or collection keeps it (`collect` skips it). Nothing more after a full disk."""
        if node_id not in self.stored and not self.disk_full and path.exists():
            if self.store_safely(f"the event log of {node_id}", self.store.put_log, self.run_id, node_id, path):
                self.stored.add(node_id)

    def collect(self, logs: dict[str, Path], stop: threading.Event | None = None) -> int:
        """Store each existing node log (gzipped); returns how many were stored (a log cut short by a
        full disk counts: it is kept, and read up to the cut). A full disk, or `stop` (a signal),
        ends the collection between two logs."""
        count = 0
        for node_id, path in logs.items():
            if node_id in self.stored:
                count += 1
                continue
            if stop is not None and stop.is_set():
                break
            if path.exists():
                stored = self.store_safely(f"the event log of {node_id}", self.store.put_log, self.run_id, node_id, path)
                count += stored or (self.run_dir / "events" / f"{node_id}.jsonl.gz").exists()
                if not stored:
                    break
        return count

    def end(self, status: str, detail: str, logs: dict[str, Path], scratch: Path,
            stop: threading.Event | None = None) -> str:
        """Collect the logs, remove the scratch directory, write how the run ended. On a full disk the
        run is `failed`, after a signal `interrupted`, and then the scratch directory (every node's
        complete log) is kept; returns that problem, or "" if the logs were all stored."""
        collected = self.collect(logs, stop)
        problem = ""
        if self.disk_full or (stop is not None and stop.is_set()):
            why = self.disk_full or "interrupted by a signal while storing the event logs"
            problem = (f"{why}: {collected} of {len(logs)} event logs stored (the last one may be cut "
                       f"short); every node's complete log is kept in {scratch}")
            status, detail = ("failed" if self.disk_full else "interrupted"), problem
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        return self.finish(status, detail, collected) or problem

    def finish(self, status: str, detail: str, collected: int) -> str:
        """Write how the run ended and put it in the store; a store that fails makes the run
        `failed` (detail `store: ...`, what it would have been kept for the retry): returns that."""
        (self.run_dir / RESERVE).unlink(missing_ok=True)
        self.manifest.update(status=status, detail=detail, logs_collected=collected,
                             finished_at=datetime.now(timezone.utc).isoformat())
        self.store.write_json(self.run_id, "manifest.json", self.manifest)
        mark_status(str(self.run_dir), status, detail)
        self.step(f"collected {collected} event logs into {self.run_dir}")
        if collected and self.store.url.startswith("s3://"):
            self.compact()
        try:
            uploaded = self.store.sync(self.run_id)
        except StoreError as err:
            return store_failed(self.store, self.run_id, str(err))
        if uploaded:
            self.step(f"uploaded {uploaded} files to {self.store.url}/{self.run_id}")
        return ""

    def compact(self) -> None:
        """The logs also as the events table (Parquet, analysis/tables/events: analysis/ingest.py), put
        up with them, so that a report in place reads a few columnar objects instead of a log per node.
        Where the analysis is not installed (the orchestrator's image in a cluster), or the conversion
        fails, the logs alone go up: the first report in place compacts them."""
        try:
            from analysis.ingest import refresh_events_table
        except ImportError:
            return
        started = time.monotonic()
        try:
            found = refresh_events_table(self.run_dir, self.manifest)
        except Exception as err:  # noqa: BLE001 - the logs are what counts; a report converts them again
            shutil.rmtree(self.run_dir / "analysis" / "tables" / "events", ignore_errors=True)  # nothing half-made goes up
            self.step(f"the logs not compacted into Parquet ({err}); a report in place reads them whole")
            return
        self.step(f"compacted {found['events']:,} events into analysis/tables/events (Parquet) in "
                  f"{time.monotonic() - started:.1f}s, for reports in place")


def store_failed(store: Store, run_id: str, error: str) -> str:
    """Mark a run whose upload failed: `failed`, detail `store: ...`; the outcome it had is kept
    under the manifest's `store_failed` for `peerlab store upload` to restore. Returns the detail."""
    path = store.run_dir(run_id) / "manifest.json"
    manifest = json.loads(path.read_text())
    held = manifest.get("store_failed") or {"status": manifest.get("status"), "detail": manifest.get("detail", "")}
    detail = f"store: {error}"
    manifest.update(status="failed", detail=detail, store_failed={**held, "error": error})
    store.write_json(run_id, "manifest.json", manifest)
    mark_status(str(store.run_dir(run_id)), "failed", detail)
    return detail


def store_retry(store: Store, run_id: str) -> int:
    """Put up what a failed upload left (StoreError if the store fails again); the run's outcome is
    restored first, so the manifest in the store says how the run itself ended. Files put up."""
    path = store.run_dir(run_id) / "manifest.json"
    manifest = json.loads(path.read_text())
    held = manifest.pop("store_failed", None)
    if held:
        manifest.update(status=held["status"], detail=held["detail"])
        store.write_json(run_id, "manifest.json", manifest)
        mark_status(str(store.run_dir(run_id)), held["status"], held["detail"])
    try:
        return store.sync(run_id)
    except StoreError as err:
        store_failed(store, run_id, str(err))
        raise
