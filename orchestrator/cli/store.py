"""`peerlab store`: the object store's commands: `serve` (the bundled S3 server), `upload` (retry
putting a run in its store after the store failed)."""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
from pathlib import Path

from orchestrator.cli.common import UsageError, add_command, err, said

DESCRIPTION = """
Runs go to the store their scenario's output.store names: a directory (file://, the default) or an
S3-compatible object store (s3://BUCKET/PREFIX, through boto3: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY). Each event log goes up as its node stops, the rest when the run ends, the
manifest last with the sha256 of every log and analysis file; `peerlab report s3://...` checks them.
"""


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "store", help="the object store: run the bundled S3 server, retry a failed upload",
        description=DESCRIPTION,
        examples=["peerlab store serve --dir ~/peerlab-s3        # SeaweedFS on 127.0.0.1:8333, bucket peerlab",
                  "peerlab store upload ~/.cache/peerlab/s3/peerlab/runs/20261127-120000-quickstart-1a2b3c"],
        note="Then, with the exported variables: peerlab run scenarios/quickstart.yaml --set "
             "output.store=s3://peerlab/runs, and peerlab report s3://peerlab/runs/RUN_ID.")
    ssub = p.add_subparsers(dest="store_command", required=True, metavar="{serve,upload}")
    s = ssub.add_parser("serve", help="run the bundled S3 server (SeaweedFS) in the foreground until Ctrl-C",
                        description="Run SeaweedFS's S3 gateway on 127.0.0.1 with its data in --dir, one "
                                    "identity (the access key and secret it prints, or AWS_ACCESS_KEY_ID and "
                                    "AWS_SECRET_ACCESS_KEY when set) and a bucket; print the variables a "
                                    "client needs. The first use builds it (make setup does too).")
    s.add_argument("--dir", type=Path, default=Path("peerlab-s3"), help="where its data stays (default ./peerlab-s3)")
    s.add_argument("--port", type=int, default=8333, help="the S3 port (default 8333; the server also takes the "
                                                          "three below it and each of the four + 10000)")
    s.add_argument("--bucket", action="append", default=[], help="a bucket to create (repeatable; default peerlab)")
    s.set_defaults(func=cmd_serve)
    u = ssub.add_parser("upload", help="put a run staged on this machine in its store (after the store failed)",
                        description="Put every file of RUN_DIR (a run staged for an s3:// store, under "
                                    "~/.cache/peerlab/s3/...) that its store does not have yet, the manifest "
                                    "last; the run's status is what it was before the store failed.")
    u.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run's local directory (the failed run printed it)")
    u.set_defaults(func=cmd_upload)


def cmd_serve(args: argparse.Namespace) -> int:
    from orchestrator.builds import gobuild
    from orchestrator.store.s3server import S3Server

    key = os.environ.get("AWS_ACCESS_KEY_ID") or "peerlab"
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY") or secrets.token_urlsafe(24)
    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        server = S3Server(args.dir.resolve(), key, secret, port=args.port, buckets=tuple(args.bucket or ["peerlab"]))
        server.start()
    except (RuntimeError, gobuild.GoBuildError) as e:
        err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
        return 1
    err.print(f"[bold green]S3 server[/] at {said(server.endpoint)}, data in {said(args.dir)}, buckets "
              f"{said(', '.join(server.buckets))}; for a client:")
    for name, value in server.env().items():
        print(f"export {name}={value}")
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        err.print("S3 server stopped (its data stays)")
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def cmd_upload(args: argparse.Namespace) -> int:
    from orchestrator.record.run_record import store_retry
    from orchestrator.store import StoreError, open_store

    manifest_path = args.run_dir / "manifest.json"
    if not manifest_path.exists():
        raise UsageError(f"{args.run_dir}: not a run directory (no manifest.json)")
    url = json.loads(manifest_path.read_text())["scenario"]["output"]["store"]
    store = open_store(url)
    if not url.startswith("s3://"):
        raise UsageError(f"{args.run_dir}: its store is {url}, a directory: nothing to upload")
    store.root = args.run_dir.resolve().parent  # where it is staged, wherever that is now
    try:
        count = store_retry(store, args.run_dir.name)
    except StoreError as e:
        err.print(f"[bold red]store:[/] {said(e)}", highlight=False)
        return 1
    err.print(f"uploaded {count} files to {said(store.url)}/{said(args.run_dir.name)}")
    return 0
