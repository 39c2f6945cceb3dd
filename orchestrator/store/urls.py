"""A store by its URL: `open_store` (file://DIR or s3://BUCKET/PREFIX) and `split_run_url` (a run's
URL -> its store and its id).

May import: store/files.py and store/s3.py; nothing else of peerlab.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from orchestrator.store.files import FileStore, Store
from orchestrator.store.s3 import S3Store


def open_store(url: str) -> Store:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        # file://./runs and file:///abs/runs both work: netloc holds "." for the relative form
        path = Path((parsed.netloc or "") + parsed.path)
        return FileStore(path.resolve())
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"store {url!r}: an s3:// store needs a bucket, e.g. s3://my-bucket/runs")
        return S3Store(parsed.netloc, parsed.path)
    raise ValueError(f"unsupported store {url!r}: use file://DIR or s3://BUCKET/PREFIX")


def split_run_url(url: str) -> tuple[Store, str]:
    """`s3://bucket/prefix/<run-id>` -> (the store at s3://bucket/prefix, run id)."""
    store_url, _, run_id = url.rstrip("/").rpartition("/")
    if not run_id or store_url.endswith(":/"):
        raise ValueError(f"{url!r}: give a run, e.g. s3://bucket/runs/<run-id>")
    return open_store(store_url), run_id
