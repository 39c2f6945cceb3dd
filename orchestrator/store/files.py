"""A directory of runs: `Store`, the interface every store has (a local directory, which a remote
store stages in and overrides `sync` and `fetch` of), `FileStore` (file://DIR, the default) and
`StoreError`, what a store that refused or failed raises.

Every file lands crash-safe (durable.py): written under a temporary name, fsynced, renamed; the
manifest, written last, makes the names of the logs stored before it durable.

May import: the standard library and store/durable.py; nothing else of peerlab.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.store.durable import fsync_dir, gzip_atomic, write_atomic


class StoreError(RuntimeError):
    """The object store refused or failed; the message names the store, the cause and the fix."""


class Store:
    """A local directory of runs. Remote stores stage here and override `sync` and `fetch`."""

    url: str

    def __init__(self, root: Path, url: str):
        self.root = root
        self.url = url

    def run_dir(self, run_id: str) -> Path:
        """The run's local directory (created)."""
        path = self.root / run_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def put_log(self, run_id: str, node_id: str, src: Path) -> None:
        """Store a node's JSON-lines event log, gzipped, as events/<node>.jsonl.gz."""
        self.put_gzip(run_id, f"events/{node_id}.jsonl.gz", src)

    def put_gzip(self, run_id: str, rel: str, src: Path) -> None:
        """Store a file of the run, gzipped, at `rel` in the run directory: whole or not at all (a full
        disk keeps what fitted), its bytes fsynced before its name appears."""
        dest = self.run_dir(run_id) / rel
        dest.parent.mkdir(exist_ok=True)
        gzip_atomic(src, dest, sync_dir=False)  # the folder is synced once, with the manifest

    def write_json(self, run_id: str, rel: str, obj: Any) -> None:
        """Write a JSON file of the run whole or not at all; the manifest also makes the names of the
        files stored before it durable (their folders fsynced)."""
        dest = self.run_dir(run_id) / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, json.dumps(obj, indent=1, default=str))
        if rel == "manifest.json":
            for folder in (dest.parent / "events", dest.parent):
                if folder.is_dir():
                    fsync_dir(folder)

    def check(self) -> None:
        """Raise StoreError, in one line, if the store cannot take a run (a directory always can)."""

    def sync(self, run_id: str) -> int:
        """Upload the run's local directory to the store; files uploaded (0 for a directory store)."""
        return 0

    def fetch(self, run_id: str) -> Path:
        """The run's local directory, downloaded first for a remote store."""
        return self.run_dir(run_id)


class FileStore(Store):
    def __init__(self, root: Path):
        super().__init__(root, f"file://{root}")
