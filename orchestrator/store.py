"""Where runs are kept: `runs/<run-id>/manifest.json`, `events/<node>.jsonl.gz`, `analysis/`.

`file://` is the default (`file://./runs`); other schemes implement the same `Store` interface.
"""
from __future__ import annotations

import abc
import gzip
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class Store(abc.ABC):
    url: str

    @abc.abstractmethod
    def run_dir(self, run_id: str) -> Path:
        """A local directory for the run (created); for remote stores, a staging copy."""

    @abc.abstractmethod
    def put_log(self, run_id: str, node_id: str, src: Path) -> None:
        """Store a node's JSON-lines event log, gzipped, as events/<node>.jsonl.gz."""

    @abc.abstractmethod
    def write_json(self, run_id: str, rel: str, obj: Any) -> None: ...


class FileStore(Store):
    def __init__(self, root: Path):
        self.root = root
        self.url = f"file://{root}"

    def run_dir(self, run_id: str) -> Path:
        path = self.root / run_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def put_log(self, run_id: str, node_id: str, src: Path) -> None:
        dest = self.run_dir(run_id) / "events" / f"{node_id}.jsonl.gz"
        dest.parent.mkdir(exist_ok=True)
        with open(src, "rb") as fin, gzip.open(dest, "wb", compresslevel=5) as fout:
            shutil.copyfileobj(fin, fout, 1024 * 1024)

    def write_json(self, run_id: str, rel: str, obj: Any) -> None:
        dest = self.run_dir(run_id) / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, indent=1, default=str))
        tmp.replace(dest)


def open_store(url: str) -> Store:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        # file://./runs and file:///abs/runs both work: netloc holds "." for the relative form
        path = Path((parsed.netloc or "") + parsed.path)
        return FileStore(path.resolve())
    raise ValueError(f"unsupported store {url!r} (only file:// is available)")
