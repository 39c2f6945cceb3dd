"""Where runs are kept: `<run-id>/manifest.json`, `status`, `events/<node>.jsonl.gz`, `analysis/`.

    file://./runs               a directory (the default)
    s3://bucket/some/prefix     any S3-compatible object store, through boto3

A run is always written to a local directory first (for s3://, a staging copy under the cache,
$PEERLAB_CACHE or ~/.cache/peerlab); `sync` uploads it when the run finishes and again after its
report. `peerlab report s3://bucket/prefix/<run-id>` fetches a run into the cache, analyses it there
and uploads the analysis. The S3 endpoint, region and credentials come from boto3's usual sources:
AWS_ENDPOINT_URL (for a self-hosted store), AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_REGION,
or ~/.aws; on Kubernetes, from the chart's Secret.
"""
from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # what a write into a full store fails with


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
        """Store a file of the run, gzipped, at `rel` in the run directory."""
        dest = self.run_dir(run_id) / rel
        dest.parent.mkdir(exist_ok=True)
        with open(src, "rb") as fin, gzip.open(dest, "wb", compresslevel=5) as fout:
            shutil.copyfileobj(fin, fout, 1024 * 1024)

    def write_json(self, run_id: str, rel: str, obj: Any) -> None:
        dest = self.run_dir(run_id) / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, indent=1, default=str))
        tmp.replace(dest)

    def sync(self, run_id: str) -> int:
        """Upload the run's local directory to the store; files uploaded (0 for a directory store)."""
        return 0

    def fetch(self, run_id: str) -> Path:
        """The run's local directory, downloaded first for a remote store."""
        return self.run_dir(run_id)


class FileStore(Store):
    def __init__(self, root: Path):
        super().__init__(root, f"file://{root}")


class S3Store(Store):
    def __init__(self, bucket: str, prefix: str, client: Any = None):
        import boto3

        self.bucket, self.prefix = bucket, prefix.strip("/")
        cache = Path(os.environ.get("PEERLAB_CACHE") or Path.home() / ".cache" / "peerlab")
        super().__init__(cache / "s3" / bucket / self.prefix, f"s3://{bucket}/{self.prefix}")
        self.s3 = client or boto3.client("s3")

    def _key(self, run_id: str, rel: str) -> str:
        return "/".join(p for p in (self.prefix, run_id, rel) if p)

    def sync(self, run_id: str) -> int:
        local = self.run_dir(run_id)
        count = 0
        for path in sorted(local.rglob("*")):
            if path.is_file() and not path.name.endswith(".tmp"):
                self.s3.upload_file(str(path), self.bucket, self._key(run_id, path.relative_to(local).as_posix()))
                count += 1
        return count

    def fetch(self, run_id: str) -> Path:
        local = self.run_dir(run_id)
        start = self._key(run_id, "") + "/"
        found = 0
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start):
            for obj in page.get("Contents", []):
                dest = local / obj["Key"][len(start):]
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.s3.download_file(self.bucket, obj["Key"], str(dest))
                found += 1
        if not found:
            raise FileNotFoundError(f"s3://{self.bucket}/{start}: no such run in the store")
        return local


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
