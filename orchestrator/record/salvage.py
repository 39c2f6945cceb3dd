"""What `peerlab clean` keeps of a run whose orchestrator died: the event logs its nodes wrote (in the
run's scratch directory, or its Docker volume), stored into its run directory wherever the stored copy
is missing or does not hold the whole log, and checked there before anything is deleted.

A stored log counts only when it covers the node's log (store/durable.py `covers`: a whole gzip
stream, its CRC checked, whose content starts with every byte of the log); one cut short by a kill
while it was written (left by a peerlab that wrote in place), damaged, or older than the log is stored
again from the log. The scratch copies may go only when every log is covered: `Salvage.complete`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.store.durable import DISK_FULL, covers, fsync_dir, gzip_atomic, remove_temps


@dataclass
class Salvage:
    stored: list[str] = field(default_factory=list)    # nodes whose log was stored (again) now
    covered: list[str] = field(default_factory=list)   # nodes whose stored log holds all of it (checked)
    missing: list[str] = field(default_factory=list)   # nodes whose log could not be stored whole
    problem: str = ""                                  # why (a full disk, no run directory)

    @property
    def complete(self) -> bool:
        """Every node's log is in the run directory, checked: the scratch copies may go."""
        return not self.missing and not self.problem


def node_logs(sources: list[Path]) -> dict[str, Path]:
    """Each node's log among `sources` (folders of <node>.jsonl); where two hold one (the scratch copy
    and the Docker volume), the longer: a log only grows, and a copy cut by a kill is shorter."""
    logs: dict[str, Path] = {}
    for folder in sources:
        for log in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            if log.stem not in logs or log.stat().st_size > logs[log.stem].stat().st_size:
                logs[log.stem] = log
    return logs


def salvage_logs(run_dir: str | None, sources: list[Path]) -> Salvage:
    """Store into `run_dir`/events every log in `sources` that is not stored whole there, and check
    each afterwards; a full disk stops it (what is missing is named). Without a run directory (no
    state file says where it is, or it is gone) every log found is missing."""
    result = Salvage()
    logs = node_logs(sources)
    root = Path(run_dir) if run_dir else None
    if root is None or not root.is_dir():
        result.missing = sorted(logs)
        if logs:
            result.problem = f"its run directory {run_dir} is gone" if run_dir else \
                "no state file says where its run directory is"
        return result
    events = root / "events"
    events.mkdir(exist_ok=True)
    remove_temps(events)   # what a storing cut by the kill left
    remove_temps(root)
    for node, log in sorted(logs.items()):
        dest = events / f"{node}.jsonl.gz"
        if dest.exists() and covers(dest, log):
            result.covered.append(node)
            continue
        if result.problem:
            result.missing.append(node)
            continue
        try:
            gzip_atomic(log, dest, sync_dir=False)
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            result.problem = f"disk full while storing the event log of {node} in {run_dir}"
            result.missing.append(node)
            continue
        if covers(dest, log):
            result.stored.append(node)
            result.covered.append(node)
        else:  # (a log that grew while it was stored: its node still ran)
            result.missing.append(node)
    fsync_dir(events)
    return result
