"""An S3 store (s3://bucket/prefix): `S3Store`, runs in a bucket staged in the cache ($PEERLAB_CACHE
or ~/.cache/peerlab); each event log goes up as its node stops, `sync` puts up the rest with the
manifest last (the sha256 and ETag of every log and analysis file), `fetch` downloads a run and checks
every sha256, `open_in_place` (an `InPlace`) fetches only a run's top-level files and checks the logs
against their ETags, for an analysis that reads them where they lie (Spark through s3a).

The endpoint, region and credentials come from boto3's usual sources: AWS_ENDPOINT_URL (for a
self-hosted store), AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_REGION, or ~/.aws; on Kubernetes,
from the chart's Secret.

May import: boto3 and botocore (inside the functions that talk to the store, so importing this module
does not load them), store/files.py, node.paths (the cache); nothing else of peerlab.
"""
from __future__ import annotations

import hashlib
import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.paths import cache_root
from orchestrator.store.files import Store, StoreError

CHECKSUMMED = ("events/", "analysis/")   # what the manifest's checksums cover (not itself, nor status)
EVENTS_TABLE = "analysis/tables/events"  # the logs compacted into Parquet (analysis/ingest.py), with its _source.json


@dataclass(frozen=True)
class InPlace:
    """A run opened where it lies (`S3Store.open_in_place`)."""
    local: Path                  # its top-level files, fetched
    url: str                     # s3a://bucket/prefix/<run id>
    log_sizes: dict[str, int]    # each event log's name (n0.jsonl.gz) and size in the store
    table_stamp: dict | None     # what the stored events table was made from, when all of it is as recorded

    @property
    def nodes(self) -> list[str]:
        return sorted(name.removesuffix(".jsonl.gz") for name in self.log_sizes)


MULTIPART = 8 * 2**20                     # larger files go up in 8 MiB parts, retried part by part
UPLOADS = 8                               # files going up at once


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class S3Store(Store):
    """Runs in a bucket under a prefix, staged in the cache. Each event log goes up as it is stored
    (as its node stops); `sync` puts up what is not there yet, the manifest last, with the sha256 of
    every event log and analysis file in the manifest's `store.checksums`; `fetch` checks them.
    An upload that fails leaves everything on local disk: `sync` again (`peerlab store upload`)
    puts up what is missing."""

    def __init__(self, bucket: str, prefix: str, client: Any = None):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket, self.prefix = bucket, prefix.strip("/")
        super().__init__(cache_root() / "s3" / bucket / self.prefix, f"s3://{bucket}/{self.prefix}")
        # a store that is down fails in seconds, not after botocore's default minutes of retries
        # a session of its own: the default one keeps the first credentials it found for the process
        self.s3 = client or boto3.session.Session().client("s3", config=Config(retries={"max_attempts": 3, "mode": "standard"},
                                                               connect_timeout=5, read_timeout=60))
        self.transfer = TransferConfig(multipart_threshold=MULTIPART, multipart_chunksize=MULTIPART)
        self.uploaded: dict[tuple[str, str], str] = {}  # (run, file) -> sha256 of what is in the store
        self.upload_error = ""                           # the first upload that failed since the last sync
        # uploads overlap: a run's thousand small logs are a thousand requests, ~11 ms each one by one
        self.pool = ThreadPoolExecutor(max_workers=UPLOADS, thread_name_prefix="peerlab-s3")
        self.pending: list[Future[None]] = []

    def _key(self, run_id: str, rel: str) -> str:
        return "/".join(p for p in (self.prefix, run_id, rel) if p)

    def explain(self, err: Exception, doing: str) -> StoreError:
        """One line: what failed, why, and what to do about it."""
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        where = f"{self.url} ({self.s3.meta.endpoint_url})"
        if isinstance(err, NoCredentialsError):
            return StoreError(f"{doing} {where}: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                              "(on Kubernetes, the chart's store Secret)")
        if isinstance(err, EndpointConnectionError):
            return StoreError(f"{doing} {where}: cannot reach the store: is it up, and AWS_ENDPOINT_URL right?")
        if isinstance(err, ClientError):
            code = err.response.get("Error", {}).get("Code", "")
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "Forbidden"):
                return StoreError(f"{doing} {where}: the store refused the credentials ({code}): check "
                                  "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (on Kubernetes, the chart's store Secret)")
            if code in ("NoSuchBucket", "404", "NotFound"):
                return StoreError(f"{doing} {where}: bucket {self.bucket!r} does not exist: create it "
                                  "(peerlab prepare storage, or your store's console)")
        return StoreError(f"{doing} {where}: {type(err).__name__}: {err}")

    def check(self) -> None:
        """Fail now, in one line, if the bucket cannot be reached with these credentials."""
        try:
            self.s3.head_bucket(Bucket=self.bucket)
        except Exception as err:
            raise self.explain(err, "checking") from None

    def _put(self, run_id: str, rel: str, path: Path, digest: str | None = None) -> None:
        digest = digest or sha256(path)
        if self.uploaded.get((run_id, rel)) == digest:
            return
        try:
            self.s3.upload_file(str(path), self.bucket, self._key(run_id, rel), Config=self.transfer)
        except Exception as err:
            raise self.explain(err, f"uploading {rel} of {run_id} to") from None
        self.uploaded[(run_id, rel)] = digest

    def put_gzip(self, run_id: str, rel: str, src: Path) -> None:
        """Stored locally, then put up in the background; a failed upload is left for `sync` (the
        file stays)."""
        super().put_gzip(run_id, rel, src)
        if not self.upload_error:  # else the store is failing: no point waiting on it for every node
            self.pending.append(self.pool.submit(self._put_soon, run_id, rel, self.run_dir(run_id) / rel))

    def _put_soon(self, run_id: str, rel: str, path: Path) -> None:
        try:
            self._put(run_id, rel, path)
        except StoreError as err:
            self.upload_error = self.upload_error or str(err)

    def flush_uploads(self) -> None:
        """Wait for the uploads under way (what failed is left for `sync`)."""
        pending, self.pending = self.pending, []
        for future in pending:
            future.result()

    def sync(self, run_id: str) -> int:
        """Put up every file of the run not in the store yet, the manifest (with the checksums) last;
        returns how many were put up. StoreError names the first that failed."""
        local = self.run_dir(run_id)
        files = {p.relative_to(local).as_posix(): p for p in sorted(local.rglob("*"))
                 if p.is_file() and not p.name.endswith(".tmp") and not p.name.startswith(".")}
        sums = {rel: sha256(path) for rel, path in files.items() if rel.startswith(CHECKSUMMED)}
        manifest_path = local / "manifest.json"
        self.flush_uploads()
        before = len(self.uploaded)
        self.upload_error = ""
        try:
            uploads = [self.pool.submit(self._put, run_id, rel, path, sums.get(rel))
                       for rel, path in files.items() if rel != "manifest.json"]
            failed = next((e for e in (f.exception() for f in uploads) if e is not None), None)
            if failed is not None:
                raise failed
            if manifest_path.exists():
                # the manifest last, naming what is in the store: the sha256 of each file (kept for the
                # files not here, as after a report that read the logs in place) and each object's ETag
                manifest = json.loads(manifest_path.read_text())
                held = manifest.get("store") or {}
                etags = self._etags(run_id)
                unchanged = {rel: digest for rel, digest in held.get("checksums", {}).items()
                             if rel in etags and held.get("etags", {}).get(rel) == etags[rel]}
                checksums = {**unchanged, **{rel: f"sha256:{d}" for rel, d in sums.items()}}
                manifest["store"] = {"url": self.url, "checksums": checksums, "etags": etags}
                self.write_json(run_id, "manifest.json", manifest)
                self._put(run_id, "manifest.json", manifest_path)
        except StoreError as err:
            done = sum(1 for (run, _) in self.uploaded if run == run_id)
            raise StoreError(f"{err}; {done} of {len(files)} files are in the store, every file is in {local}: "
                             f"`peerlab store upload {local}` puts up the rest") from None
        return len(self.uploaded) - before

    def _etags(self, run_id: str) -> dict[str, str]:
        """The ETag of each event log and analysis file of the run in the store (one listing)."""
        start = self._key(run_id, "") + "/"
        try:
            return {obj["Key"][len(start):]: obj["ETag"].strip('"')
                    for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start)
                    for obj in page.get("Contents", []) if obj["Key"][len(start):].startswith(CHECKSUMMED)}
        except Exception as err:
            raise self.explain(err, f"listing {run_id} in") from None

    def open_in_place(self, run_id: str) -> InPlace:
        """For an analysis that reads the logs where they lie: the run's top-level files (manifest,
        status, link counters) fetched into the cache, the logs checked against the ETags the manifest
        recorded (one listing, no log downloaded); the events table in the store (the logs compacted
        into Parquet: analysis/tables/events) offered when every object of it has the ETag the
        manifest recorded and the table holds exactly the files its stamp (_source.json) names, with
        that stamp, which says what it was made from."""
        local = self.run_dir(run_id)
        start = self._key(run_id, "") + "/"
        try:
            listing = [obj for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start)
                       for obj in page.get("Contents", [])]
            top = [obj["Key"] for obj in listing if "/" not in obj["Key"][len(start):]]
            if start + "manifest.json" not in top:
                raise FileNotFoundError(f"{self.url}/{run_id}: no such run in the store")
            for key in top:
                self.s3.download_file(self.bucket, key, str(local / key[len(start):]))
        except FileNotFoundError:
            raise
        except Exception as err:
            raise self.explain(err, f"fetching {run_id} from") from None
        manifest = json.loads((local / "manifest.json").read_text())
        want = (manifest.get("store") or {}).get("etags") or {}
        logs = {obj["Key"][len(start):]: obj for obj in listing if obj["Key"][len(start):].startswith("events/")}
        if not logs:
            raise FileNotFoundError(f"{self.url}/{run_id}: the run has no event logs in the store")
        for rel in sorted(set(want) | set(logs)):
            if rel.startswith("events/") and want.get(rel) != (logs[rel]["ETag"].strip('"') if rel in logs else None):
                what = ("is missing from the store" if rel not in logs else
                        "is not in the manifest's ETags (uploaded by an older peerlab? report it with "
                        "--local-copy)" if rel not in want else "does not match its ETag in the manifest "
                        "(changed or damaged in the store)")
                raise StoreError(f"{self.url}/{run_id}: {rel} {what}")
        table = {obj["Key"][len(start):]: obj for obj in listing
                 if obj["Key"][len(start):].startswith(EVENTS_TABLE + "/")}
        stamp = None
        if table and all(want.get(rel) == obj["ETag"].strip('"') for rel, obj in table.items()) \
                and f"{EVENTS_TABLE}/_source.json" in table:
            try:
                stamp = json.loads(self.s3.get_object(Bucket=self.bucket, Key=start + EVENTS_TABLE + "/_source.json")
                                   ["Body"].read())
            except Exception as err:
                raise self.explain(err, f"fetching {run_id}'s events table stamp from") from None
            data = {rel.removeprefix(EVENTS_TABLE + "/") for rel in table
                    if not rel.endswith("/")} - {"_source.json", "_SUCCESS"}  # (s3a's directory markers end in /)
            if set(stamp.get("files") or ()) != data:  # a file more or less than it was made of: not that table
                stamp = None
        return InPlace(local, f"s3a://{self.bucket}/{start.rstrip('/')}",
                       {rel.removeprefix("events/"): obj["Size"] for rel, obj in logs.items()}, stamp)

    def fetch(self, run_id: str) -> Path:
        """Download the run and check every file against the manifest's checksums."""
        local = self.run_dir(run_id)
        start = self._key(run_id, "") + "/"

        def download(key: str) -> None:
            dest = local / key[len(start):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.s3.download_file(self.bucket, key, str(dest), Config=self.transfer)
        try:
            keys = [obj["Key"] for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start)
                    for obj in page.get("Contents", [])]
            for _ in self.pool.map(download, keys):
                pass
        except Exception as err:
            raise self.explain(err, f"fetching {run_id} from") from None
        found = len(keys)
        if not found:
            raise FileNotFoundError(f"s3://{self.bucket}/{start}: no such run in the store")
        self.verify(run_id)
        return local

    def verify(self, run_id: str) -> int:
        """Check the run's local files against its manifest's checksums; how many were checked."""
        local = self.run_dir(run_id)
        manifest = json.loads((local / "manifest.json").read_text()) if (local / "manifest.json").exists() else {}
        sums = (manifest.get("store") or {}).get("checksums") or {}
        for rel, want in sums.items():
            path = local / rel
            if not path.exists():
                raise StoreError(f"{self.url}/{run_id}: {rel} is in the manifest's checksums but not in the "
                                 "store: the upload did not finish (`peerlab store upload` on the machine that ran it)")
            digest = sha256(path)
            if f"sha256:{digest}" != want:
                raise StoreError(f"{self.url}/{run_id}: {rel} does not match its checksum in the manifest "
                                 "(changed or damaged in the store)")
            self.uploaded[(run_id, rel)] = digest  # in the store as it is here: a later sync skips it
        return len(sums)
