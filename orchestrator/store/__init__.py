"""Where runs are kept: `<run-id>/manifest.json`, `status`, `events/<node>.jsonl.gz`, `analysis/`.

    file://./runs               a directory (the default)
    s3://bucket/some/prefix     any S3-compatible object store, through boto3

A run is always written to a local directory first (for s3://, a staging copy under the cache):
each event log goes up as its node stops, `sync` puts up the rest when the run finishes (the manifest
last) and again after its report; a store that fails leaves the run `failed` with a detail that
starts `store:` and every file on local disk, and `peerlab store upload DIR` retries.
`peerlab report s3://bucket/prefix/<run-id>` reads the run in place, or with --local-copy fetches it
whole and analyses the copy; the analysis goes back up.

    files.py     Store (a local directory of runs, the interface), FileStore (file://), StoreError
    s3.py        S3Store (s3://, staged in the cache, every file checksummed), InPlace (a run read
                 where it lies), sha256
    urls.py      open_store (a store by its URL), split_run_url (a run's URL -> its store and id)
    durable.py   crash-safe files: temporary name, fsync, rename (also used by record/ and backends/)
    s3server.py  the bundled S3 server (SeaweedFS's `weed`, pinned in seaweedfs/)

May import: the standard library, boto3 and botocore (only when an S3Store is made), node.paths (the
cache) and, for s3server.py, orchestrator.builds (the pinned build); never record/, backends/, run/ or
cli/, which import it.
"""
from orchestrator.store.durable import DISK_FULL as DISK_FULL  # what a write into a full store fails with
from orchestrator.store.files import FileStore, Store, StoreError
from orchestrator.store.s3 import MULTIPART, UPLOADS, InPlace, S3Store, sha256
from orchestrator.store.urls import open_store, split_run_url

__all__ = ["DISK_FULL", "FileStore", "InPlace", "MULTIPART", "S3Store", "Store", "StoreError", "UPLOADS",
           "open_store", "sha256", "split_run_url"]
