"""The bundled S3 server: SeaweedFS's `weed server` (master, volume server, filer and S3 gateway in
one process), pinned in orchestrator/store/seaweedfs and built by `make setup` into the user's cache
(orchestrator/builds/gobuild.py). The tests run the s3:// store against it, and `peerlab store serve` runs it
for users without an object store of their own.

It listens on loopback only, keeps its data under one directory, and accepts one identity: the
access key and secret it is given (requests signed with anything else are refused, as by any S3
service). `env()` gives the variables a client (boto3, the AWS CLI, peerlab) needs to use it.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from orchestrator.builds import gobuild
from orchestrator.store.durable import write_private

PIN = Path(__file__).resolve().parent / "seaweedfs"
PACKAGE = "github.com/seaweedfs/seaweedfs/weed"
GRPC_OFFSET = 10000  # SeaweedFS's gRPC port of each service is its HTTP port + 10000
SERVICES = ("master", "volume", "filer", "s3")


def weed(build: bool = True) -> Path:
    """The pinned `weed` binary (built on first use unless `build` is false)."""
    return gobuild.binary(PIN, PACKAGE, "seaweedfs-weed", build=build)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pick_ports(first: int | None) -> dict[str, int]:
    """HTTP ports for the four services, each with its gRPC port (+10000) free too; the S3 port is
    `first` when given."""
    rng = random.Random()
    for _ in range(200):
        base = first - 3 if first else rng.randrange(20000, 55000 - GRPC_OFFSET, 4)
        ports = {name: base + i for i, name in enumerate(SERVICES)}
        if all(_free(p) and _free(p + GRPC_OFFSET) for p in ports.values()):
            return ports
        if first:
            break
    raise RuntimeError("no free ports for the S3 server on 127.0.0.1" +
                       (f" around {first} (and {first + GRPC_OFFSET}): pick another --port" if first else ""))


class S3Server:
    """One SeaweedFS server with its S3 gateway on 127.0.0.1, data under `data_dir`."""

    def __init__(self, data_dir: Path, access_key: str, secret_key: str, *, port: int | None = None,
                 buckets: tuple[str, ...] = ("peerlab",), region: str = "us-east-1"):
        self.data_dir = data_dir
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.buckets = buckets
        self.ports = _pick_ports(port)
        self.binary = weed()   # resolved once: a later change of $PEERLAB_CACHE does not rebuild it
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def env(self) -> dict[str, str]:
        """What an S3 client needs to reach this server (boto3 reads these, peerlab too)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_DEFAULT_REGION": self.region}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key)

    def _command(self) -> list[str]:
        identities = {"identities": [{"name": "peerlab", "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                                      "credentials": [{"accessKey": self.access_key,
                                                       "secretKey": self.secret_key}]}]}
        config = self.data_dir / "s3-identities.json"
        write_private(config, json.dumps(identities))  # 0o600 from its creation: it holds the secret key
        p = self.ports
        # -logtostderr: its log goes to weed.log only, none in /tmp
        return [str(self.binary), "-logtostderr", "server", f"-dir={self.data_dir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master'] + GRPC_OFFSET}",
                # one master electing itself: no need for raft's 10 s timeout before it takes writes
                "-master.electionTimeout=1s",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume'] + GRPC_OFFSET}",
                "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer'] + GRPC_OFFSET}",
                "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3'] + GRPC_OFFSET}", f"-s3.config={config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0",  # the table catalogues peerlab does not use
                # small volumes, as many as the disk allows: a test's few MB do not reserve 30 GB
                "-volume.max=0", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0"]

    def start(self, timeout: float = 60.0) -> "S3Server":
        """Start the server and wait until it stores what it is sent; create the buckets."""
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "weed.log", "ab")
        self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # a terminal's ^C reaches peerlab, which stops it
        log.close()
        client = self.client()
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
                for bucket in self.buckets:
                    if bucket not in existing:
                        client.create_bucket(Bucket=bucket)
                # up means it stores: after a restart the S3 gateway answers listings seconds before
                # its master is elected again and volumes can take writes
                client.put_object(Bucket=self.buckets[0], Key=".peerlab-ready", Body=b"")
                client.delete_object(Bucket=self.buckets[0], Key=".peerlab-ready")
                return self
            except Exception as err:  # not listening yet, or the filer not ready: try again
                last = err
                time.sleep(0.3)
        self.stop()
        tail = (self.data_dir / "weed.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the S3 server did not come up within {timeout:.0f} s (last error: {last}); "
                           f"its log ({self.data_dir / 'weed.log'}) ends:\n{tail}")

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (this SeaweedFS often lingers on SIGTERM; what
        it stored is on disk by then); the data stays in `data_dir`, the sockets it left in /tmp go."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # its gRPC services also listen on unix sockets at fixed paths in /tmp, named by port
        for port in self.ports.values():
            for p in (port, port + GRPC_OFFSET):
                for sock in Path("/tmp").glob(f"seaweedfs-*-{p}.sock"):
                    sock.unlink(missing_ok=True)

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    """`python -m orchestrator.store.s3server build`: build the pinned binary (make setup)."""
    import sys

    try:
        print(weed())
    except gobuild.GoBuildError as err:
        print(f"peerlab: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
