"""What the analysis shows while it works: on a terminal, a bar with the stage and step it is on; in a
log, one line per stage with its wall time. The stages' times are also kept (analysis/timings.json)."""
from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class AnalysisProgress:
    def __init__(self, console: Console | None = None, total: int = 0):
        self.console = console
        self.timings: dict[str, float] = {}
        self.steps: dict[str, float] = {}  # "stage: step" -> seconds
        self._step: tuple[str, float] | None = None
        self._stage: str | None = None
        self._detail = ""
        self._started = 0.0
        self._bar: Progress | None = None
        self._task: Any = None
        self._lock = threading.Lock()
        if console is not None and console.is_terminal:
            self._bar = Progress(TextColumn("analysis: {task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
            self._task = self._bar.add_task("", total=total)
            self._bar.start()

    def step(self, stage: str, name: str = "") -> None:
        """Start a step of `stage` (ending the previous step, and the previous stage if it differs)."""
        self._end_step()
        self._step = (f"{stage}: {name}" if name else stage, time.perf_counter())
        if self._bar is not None:
            if self._stage is not None:
                self._bar.advance(self._task)
            self._bar.update(self._task, description=f"{stage}: {name}" if name else stage)
        if stage != self._stage:
            self._end_stage()
            self._stage, self._started = stage, time.perf_counter()

    def done(self, stage: str, name: str, seconds: float) -> None:
        """A step of the current stage that ran beside others (metrics computed side by side) has
        ended: its own time is kept and the bar moves on. Safe from any thread."""
        with self._lock:
            self.steps[f"{stage}: {name}"] = round(seconds, 3)
            if self._bar is not None:
                self._bar.advance(self._task)
                self._bar.update(self._task, description=f"{stage}: {name}")

    def note(self, text: str) -> None:
        """A detail of the current stage, said once it ends (e.g. how many events were ingested)."""
        self._detail = text

    def close(self) -> dict[str, float]:
        self._end_step()
        self._end_stage()
        if self._bar is not None:
            self._bar.stop()
        return self.timings

    def _end_step(self) -> None:
        if self._step is not None:
            self.steps[self._step[0]] = round(time.perf_counter() - self._step[1], 3)
            self._step = None

    def _end_stage(self) -> None:
        if self._stage is None:
            return
        took = time.perf_counter() - self._started
        self.timings[self._stage] = round(self.timings.get(self._stage, 0.0) + took, 3)
        detail, self._detail = self._detail, ""
        if self.console is not None:
            self.console.print(f"analysis: {self._stage} {took:.1f} s" + (f" ({detail})" if detail else ""),
                               highlight=False)
        self._stage = None
