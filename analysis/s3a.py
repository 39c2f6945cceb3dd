"""Spark's s3a connector, in one place: the jars it needs and the session settings for an S3 store.

The jars are hadoop-aws at the Hadoop version PySpark ships (its hadoop-client-api jar says which),
and what that hadoop-aws is built against (the AWS SDK v2 bundle, the analytics accelerator), pinned
per Hadoop version in JARS from hadoop-aws's own pom. `ensure_jars` downloads them once from Maven
Central into the user's cache (~/.cache/peerlab/jars, or under $PEERLAB_CACHE), each checked against
Central's SHA-1 and renamed into place only when whole; `make test` runs it. The SDK bundle (686 MB,
the clients of every AWS service, their dependencies shaded inside) is then cut to the services s3a
can call (`S3A_SERVICES`: 24 MB) and the whole one deleted: every JVM that opens it (a report's
driver, each executor on Kubernetes) indexes 17 thousand entries instead of 398 thousand, and the
executors' image (orchestrator/builds/spark_image.py) is 660 MB smaller. `conf` gives the settings
that point s3a at the store boto3 uses: AWS_ENDPOINT_URL (path-style addressing, as self-hosted stores
want), AWS_DEFAULT_REGION; credentials stay in the environment, where the SDK's default chain reads
them, never in Spark's configuration.

May import: pyspark, node.paths (the cache); nothing of orchestrator/.
"""
from __future__ import annotations

import hashlib
import os
import sys
import urllib.request
from pathlib import Path

import pyspark

from node.paths import cache_root

CENTRAL = "https://repo1.maven.org/maven2"
# Hadoop version -> (group, artifact, version) of what s3a needs beside PySpark's own jars
JARS = {
    "3.5.0": [("org.apache.hadoop", "hadoop-aws", "3.5.0"),
              ("software.amazon.awssdk", "bundle", "2.35.4"),
              ("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.3.1")],
}


# the AWS services whose clients s3a may use, kept in the cut bundle (the rest are dropped): S3 itself;
# S3 Control, which the S3 Access Grants plugin (fs.s3a.s3accessgrants.enabled) calls; STS for assumed
# roles and web identity; KMS for SSE-KMS; SSO and SSO-OIDC for the SDK's profile credentials.
# tests/analysis/test_s3a.py checks that every service hadoop-aws and these name is kept.
S3A_SERVICES = ("s3", "s3control", "sts", "kms", "sso", "ssooidc")
SERVICES = "software/amazon/awssdk/services/"


class S3aUnavailable(RuntimeError):
    """The s3a jars are missing and could not be fetched; the message says what to do."""


def hadoop_version() -> str:
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        return jar.stem.removeprefix("hadoop-client-api-")
    raise S3aUnavailable(f"no hadoop-client-api jar in {jars}: is PySpark installed whole?")


def jar_dir() -> Path:
    return cache_root() / "jars"


def _url(group: str, artifact: str, version: str, suffix: str = ".jar") -> str:
    return f"{CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}{suffix}"


def _fetch(group: str, artifact: str, version: str, dest: Path) -> None:
    want = urllib.request.urlopen(_url(group, artifact, version, ".jar.sha1"), timeout=30).read().decode().split()[0]
    partial = dest.with_name(f".{dest.name}.{os.getpid()}")
    h = hashlib.sha1()
    with urllib.request.urlopen(_url(group, artifact, version), timeout=60) as response, open(partial, "wb") as out:
        size = int(response.headers.get("Content-Length") or 0)
        print(f"peerlab: fetching {artifact}-{version}.jar ({size / 1e6:.0f} MB) from Maven Central for Spark's s3a",
              file=sys.stderr, flush=True)
        for block in iter(lambda: response.read(1 << 20), b""):
            h.update(block)
            out.write(block)
    if h.hexdigest() != want:
        partial.unlink(missing_ok=True)
        raise S3aUnavailable(f"{artifact}-{version}.jar from Maven Central does not match its SHA-1: try again")
    os.replace(partial, dest)


def dropped_service(name: str) -> bool:
    """Whether a bundle entry is a class or resource of an AWS service s3a never calls."""
    if not name.startswith(SERVICES):
        return False
    service, inside, _ = name[len(SERVICES):].partition("/")
    return bool(inside) and service not in S3A_SERVICES


def cut_bundle(bundle: Path, dest: Path) -> None:
    """Write `dest`: the SDK bundle without the services s3a never calls (entries copied as they are)."""
    import zipfile

    partial = dest.with_name(f".{dest.name}.{os.getpid()}")
    with zipfile.ZipFile(bundle) as whole, zipfile.ZipFile(partial, "w") as cut:
        for entry in whole.infolist():
            if not dropped_service(entry.filename):
                cut.writestr(entry, whole.read(entry), compress_type=entry.compress_type)
    os.replace(partial, dest)


def _cut_once(bundle: Path, cut: Path) -> Path:
    """`cut`, made from the whole bundle unless another process made it first; the whole one removed."""
    try:
        if not cut.exists():
            print(f"peerlab: cutting {bundle.name} to the AWS services s3a calls ({', '.join(S3A_SERVICES)})",
                  file=sys.stderr, flush=True)
            cut_bundle(bundle, cut)
    except FileNotFoundError:  # another process cut it and removed the whole one meanwhile
        if not cut.exists():
            raise
    bundle.unlink(missing_ok=True)
    return cut


def ensure_jars(fetch: bool = True) -> list[Path]:
    """The s3a jars for this PySpark, fetched first where missing (unless `fetch` is false); the SDK
    bundle cut to the services s3a calls (`cut_bundle`), the whole one removed once cut."""
    version = hadoop_version()
    if version not in JARS:
        raise S3aUnavailable(f"PySpark's Hadoop is {version}; peerlab pins the s3a jars for Hadoop "
                             f"{', '.join(JARS)} (analysis/s3a.py JARS): add its hadoop-aws and SDK versions there")
    paths = []
    for group, artifact, v in JARS[version]:
        dest = jar_dir() / f"{artifact}-{v}.jar"
        cut = jar_dir() / f"{artifact}-{v}-s3a.jar" if artifact == "bundle" else None
        if cut is not None and cut.exists():
            paths.append(cut)
            continue
        if not dest.exists() and not (cut is not None and cut.exists()):  # (another process may cut it meanwhile)
            if not fetch:
                raise S3aUnavailable(f"{dest} is missing: `make test` (or python -m analysis.s3a) fetches it")
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                _fetch(group, artifact, v, dest)
            except OSError as err:
                raise S3aUnavailable(f"fetching {artifact}-{v}.jar from Maven Central failed ({err}): "
                                     f"check the network, or put the jar in {dest.parent}") from None
        paths.append(dest if cut is None else _cut_once(dest, cut))
    return paths


def conf(fetch: bool = True) -> dict[str, str]:
    """Spark settings for s3a:// paths on the store the environment names (boto3's variables)."""
    settings = {"spark.jars": ",".join(str(p) for p in ensure_jars(fetch)),
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.endpoint.region": os.environ.get("AWS_DEFAULT_REGION")
                or os.environ.get("AWS_REGION") or "us-east-1"}
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings["spark.hadoop.fs.s3a.endpoint"] = endpoint
        settings["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https")).lower()
    return settings


if __name__ == "__main__":
    try:
        for path in ensure_jars():
            print(path)
    except S3aUnavailable as err:
        print(f"peerlab: {err}", file=sys.stderr)
        sys.exit(1)
