"""What every run leaves in the store, whatever executed it (emulation or simulation): its id, the
manifest (scenario, plan, versions, backend, status), the `status` file, progress lines, and the
event logs collected as events/<node>.jsonl.gz."""
from __future__ import annotations

import platform
import secrets
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.model.plan import RunPlan, make_plan
from orchestrator.model.scenario import Scenario
from orchestrator.run.cleanup import mark_status
from orchestrator.store import Store, open_store


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
    """Plan, run id, run directory and manifest of one run; subclasses execute it."""

    def __init__(self, scenario: Scenario, *, backend: str, seed: int | None = None,
                 console: Console | None = None, label: str = ""):
        self.scenario = scenario
        self.label = label
        self.plan: RunPlan = make_plan(scenario, seed)
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

    def step(self, text: str) -> None:
        self.console.print(f"[bold cyan]{time.strftime('%H:%M:%S')}[/] {text}")

    def warn(self, text: str) -> None:
        self.console.print(f"[bold yellow]warning:[/] {text}")

    def begin(self) -> None:
        self.store.write_json(self.run_id, "manifest.json", self.manifest)
        mark_status(str(self.run_dir), "running")

    def collect(self, logs: dict[str, Path]) -> int:
        """Store each existing node log (gzipped); returns how many were stored."""
        count = 0
        for node_id, path in logs.items():
            if path.exists():
                self.store.put_log(self.run_id, node_id, path)
                count += 1
        return count

    def finish(self, status: str, detail: str, collected: int) -> None:
        self.manifest.update(status=status, detail=detail, logs_collected=collected,
                             finished_at=datetime.now(timezone.utc).isoformat())
        self.store.write_json(self.run_id, "manifest.json", self.manifest)
        mark_status(str(self.run_dir), status, detail)
        self.step(f"collected {collected} event logs into {self.run_dir}")
        uploaded = self.store.sync(self.run_id)
        if uploaded:
            self.step(f"uploaded {uploaded} files to {self.store.url}/{self.run_id}")
