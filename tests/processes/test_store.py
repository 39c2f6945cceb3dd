"""Stores: file:// and s3://, against the bundled S3 server (SeaweedFS, orchestrator/store/s3server.py):
uploads as logs are stored, checksums in the manifest checked on read, multipart uploads, clear errors
for wrong credentials, a server that fails mid-upload and the retry."""
import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from orchestrator.model.scenario import parse_scenario
from orchestrator.record.run_record import store_failed
from orchestrator.store import MULTIPART, FileStore, S3Store, StoreError, open_store, split_run_url
from orchestrator.store.s3server import S3Server
from tests.support.cli import cache_with_jars, peerlab


def test_store_urls():
    assert isinstance(open_store("file:///tmp/x"), FileStore)
    with pytest.raises(ValueError, match="needs a bucket"):
        open_store("s3:///runs")
    with pytest.raises(ValueError, match="file://DIR"):
        open_store("gs://b/runs")
    with pytest.raises(Exception, match="output.store") as err:
        parse_scenario("name: x\noutput: {store: 'gs://b/runs'}\n")
    assert "s3://BUCKET/PREFIX" in str(err.value)


@pytest.mark.slow
def test_s3_store_uploads_and_fetches_a_run(s3_endpoint, tmp_path: Path, monkeypatch):
    store = open_store("s3://peerlab/team/runs")
    assert isinstance(store, S3Store) and store.url == "s3://peerlab/team/runs"
    log = tmp_path / "n0.jsonl"
    log.write_text('{"type": "start"}\n' * 1000)
    store.write_json("r1", "manifest.json", {"run_id": "r1"})
    store.put_log("r1", "n0", log)   # goes up at once, as its node stops
    store.flush_uploads()
    keys = sorted(o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix="team/")["Contents"])
    assert keys == ["team/runs/r1/events/n0.jsonl.gz"]
    assert store.sync("r1") == 1     # the manifest, with the log's checksum; the log is not sent twice
    keys = sorted(o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix="team/")["Contents"])
    assert keys == ["team/runs/r1/events/n0.jsonl.gz", "team/runs/r1/manifest.json"]
    stored = json.loads(s3_endpoint.get_object(Bucket="peerlab", Key="team/runs/r1/manifest.json")["Body"].read())
    gz = (store.run_dir("r1") / "events" / "n0.jsonl.gz").read_bytes()
    assert stored["store"]["checksums"] == {"events/n0.jsonl.gz": "sha256:" + hashlib.sha256(gz).hexdigest()}

    monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path / "elsewhere"))
    again, run_id = split_run_url("s3://peerlab/team/runs/r1")
    local = again.fetch(run_id)
    assert local.is_relative_to(tmp_path / "elsewhere")
    assert json.loads((local / "manifest.json").read_text())["run_id"] == "r1"
    assert (local / "events" / "n0.jsonl.gz").read_bytes() == (store.run_dir("r1") / "events" / "n0.jsonl.gz").read_bytes()
    with pytest.raises(FileNotFoundError, match="no such run"):
        again.fetch("r2")


@pytest.mark.slow
def test_report_of_a_missing_s3_run_says_so(s3_endpoint):
    result = peerlab("report", "s3://peerlab/runs/nope", timeout=60)
    assert result.returncode == 2
    assert "no such run" in result.stderr


@pytest.mark.slow
def test_a_damaged_object_is_refused_on_read(s3_endpoint, tmp_path: Path, monkeypatch):
    store = open_store("s3://peerlab/damaged")
    log = tmp_path / "n0.jsonl"
    log.write_text('{"type": "start"}\n' * 100)
    store.write_json("r1", "manifest.json", {"run_id": "r1"})
    store.put_log("r1", "n0", log)
    store.sync("r1")
    s3_endpoint.put_object(Bucket="peerlab", Key="damaged/r1/events/n0.jsonl.gz", Body=gzip.compress(b"{}\n"))
    result = peerlab("report", "s3://peerlab/damaged/r1", timeout=120,   # in place: the ETag
                     env={**os.environ, "PEERLAB_CACHE": str(tmp_path / "reader")})
    assert result.returncode == 1
    assert "events/n0.jsonl.gz does not match its ETag in the manifest" in result.stderr
    copy = peerlab("report", "s3://peerlab/damaged/r1", "--local-copy", timeout=120,   # fetched: the sha256
                   env={**os.environ, "PEERLAB_CACHE": str(tmp_path / "copier")})
    assert copy.returncode == 1
    assert "events/n0.jsonl.gz does not match its checksum in the manifest" in copy.stderr


@pytest.mark.slow
def test_a_large_log_goes_up_in_parts(s3_endpoint, tmp_path: Path):
    store = open_store("s3://peerlab/large")
    log = tmp_path / "n0.jsonl"
    log.write_bytes(os.urandom(MULTIPART * 2 + 1000))   # incompressible: the .gz is as large
    store.put_log("r1", "n0", log)
    store.flush_uploads()
    head = s3_endpoint.head_object(Bucket="peerlab", Key="large/r1/events/n0.jsonl.gz")
    assert head["ETag"].strip('"').endswith("-3")          # an S3 multipart ETag: <md5 of md5s>-<parts>
    assert head["ContentLength"] == (store.run_dir("r1") / "events" / "n0.jsonl.gz").stat().st_size


@pytest.mark.slow
def test_wrong_credentials_are_refused_in_one_line_before_the_run(s3_endpoint, tmp_path: Path):
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "not-the-secret", "PEERLAB_CACHE": str(tmp_path)}
    result = peerlab("run", "scenarios/quickstart.yaml", "--backend", "sim", "--set", "output.store=s3://peerlab/runs",
                     timeout=120, env=env)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "the store refused the credentials (" in lines[0], result.stderr
    assert "AWS_SECRET_ACCESS_KEY" in lines[0] and "not-the-secret" not in result.stderr
    assert not (tmp_path / "s3").exists()   # nothing was run


@pytest.mark.spark
def test_a_run_into_s3_is_reported_in_place_through_s3a_as_from_a_directory(s3_endpoint, tmp_path: Path):
    """A run stored to s3:// (its report made from the local staging copy, as from file://), then
    reported from s3:// by another machine's cache: Spark reads the logs through s3a, nothing but the
    manifest comes to the cache, the metrics are the same; no trace of the secret anywhere."""
    result = peerlab("run", "scenarios/quickstart.yaml", "--backend", "sim", "--set", "output.store=s3://peerlab/sim",
                     timeout=300, env={**os.environ, "PEERLAB_CACHE": str(tmp_path / "writer")})
    assert result.returncode == 0, result.stderr[-2000:]
    run_id = Path(result.stdout.strip().splitlines()[-1]).name
    again = peerlab("report", f"s3://peerlab/sim/{run_id}", timeout=300,
                    env={**os.environ, "PEERLAB_CACHE": str(cache_with_jars(tmp_path / "reader"))})
    assert again.returncode == 0, again.stderr[-2000:]
    assert "through s3a" in again.stderr
    reader = tmp_path / "reader" / "s3" / "peerlab" / "sim" / run_id
    assert not (reader / "events").exists() and not (reader / "analysis" / "tables").exists()   # no local copy
    first = json.loads((tmp_path / "writer" / "s3" / "peerlab" / "sim" / run_id / "analysis" / "metrics.json").read_text())
    second = json.loads((reader / "analysis" / "metrics.json").read_text())
    assert first["delivery_ratio"] == 1.0
    for key in sorted(set(first) - {"ingest"}):
        assert second.get(key) == first[key], key
    keys = [o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix=f"sim/{run_id}/analysis/tables/")["Contents"]]
    assert any(k.endswith(".parquet") for k in keys)   # written by Spark, through s3a
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    for obj in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix=f"sim/{run_id}/")["Contents"]:
        body = s3_endpoint.get_object(Bucket="peerlab", Key=obj["Key"])["Body"].read()
        assert secret.encode() not in (gzip.decompress(body) if obj["Key"].endswith(".gz") else body)
    assert secret not in result.stderr + again.stderr


@pytest.mark.slow  # a server of its own, started and stopped (make test runs it)
def test_a_server_stopped_mid_upload_fails_the_run_and_the_retry_completes(tmp_path: Path, monkeypatch):
    """The store goes down while a run's large log is going up: the run is `failed` with a `store:`
    detail naming the retry, every byte is still on local disk; with the server back, `peerlab
    store upload` puts up the rest, the run's own outcome is restored, and a reader's checksums pass."""
    server = S3Server(tmp_path / "server", "retry-key", "retry-secret").start()
    try:
        for name, value in {**server.env(), "PEERLAB_CACHE": str(tmp_path / "cache")}.items():
            monkeypatch.setenv(name, value)
        store = open_store("s3://peerlab/retry")
        store.write_json("r1", "manifest.json", {"run_id": "r1", "status": "completed", "detail": "",
                                                 "scenario": {"output": {"store": "s3://peerlab/retry"}}})
        small, big = tmp_path / "n0.jsonl", tmp_path / "n1.jsonl"
        small.write_text('{"type": "start"}\n' * 100)
        big.write_bytes(os.urandom(24 * 2**20))
        store.upload_error = "held back"   # stage the logs without uploading them now
        store.put_log("r1", "n0", small)
        store.put_log("r1", "n1", big)
        store.upload_error = ""
        local = store.run_dir("r1")
        before = {p.name: p.read_bytes() for p in (local / "events").iterdir()}

        failure: list[StoreError] = []
        parts: list[int] = []
        real_upload_part = store.s3.upload_part

        def upload_part(**kwargs):   # the server goes down as the log's second part starts
            parts.append(kwargs["PartNumber"])
            if len(parts) == 2:
                server.stop(grace=0)
            return real_upload_part(**kwargs)
        store.s3.upload_part = upload_part
        try:
            store.sync("r1")
        except StoreError as err:
            failure.append(err)
        store.s3.upload_part = real_upload_part
        assert failure, "the upload did not notice the store going away"
        detail = store_failed(store, "r1", str(failure[0]))
        assert detail.startswith("store: uploading ") and "peerlab store upload" in detail
        status = json.loads((local / "status").read_text())
        assert status["status"] == "failed" and status["detail"] == detail
        assert {p.name: p.read_bytes() for p in (local / "events").iterdir()} == before

        server.start()
        result = peerlab("store", "upload", str(local), timeout=300)
        assert result.returncode == 0, result.stderr
        manifest = json.loads((local / "manifest.json").read_text())
        assert manifest["status"] == "completed" and "store_failed" not in manifest
        monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path / "reader"))
        again, run_id = split_run_url("s3://peerlab/retry/r1")
        fetched = again.fetch(run_id)   # checks every checksum
        assert {p.name: p.read_bytes() for p in (fetched / "events").iterdir()} == before
    finally:
        server.stop()
    left = [p.name for port in server.ports.values() for p in Path("/tmp").glob(f"seaweedfs-*-{port + 10000}.sock")]
    assert not left and not list(Path("/tmp").glob("seaweedfs-weed*"))   # no socket, no log file left


@pytest.mark.slow  # a server of its own, started and stopped (make test runs it)
def test_store_serve_runs_the_bundled_server_until_told_to_stop(tmp_path: Path):
    import subprocess
    import sys

    from orchestrator.store.s3server import _pick_ports

    port = _pick_ports(None)["s3"]
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "store", "serve", "--dir", str(tmp_path),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "AWS_ACCESS_KEY_ID": "serve-key", "AWS_SECRET_ACCESS_KEY": "serve-secret"})
    try:
        exports = dict(proc.stdout.readline().removeprefix("export ").strip().split("=", 1) for _ in range(4))
        assert exports["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        assert exports["AWS_ACCESS_KEY_ID"] == "serve-key"
        import boto3

        client = boto3.session.Session().client("s3", endpoint_url=exports["AWS_ENDPOINT_URL"], region_name="us-east-1",
                                                aws_access_key_id="serve-key", aws_secret_access_key="serve-secret")
        client.put_object(Bucket="peerlab", Key="hello", Body=b"world")
        assert client.get_object(Bucket="peerlab", Key="hello")["Body"].read() == b"world"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    assert "S3 server stopped" in proc.stderr.read()
    assert not list(Path("/tmp").glob(f"seaweedfs-*-{port}.sock"))
    assert (tmp_path / "data").is_dir()   # the data stays


@pytest.mark.spark
def test_a_run_stored_to_s3_is_compacted_and_its_report_in_place_reads_the_compacted_table(s3_endpoint, tmp_path: Path):
    """A run stored to s3:// without its report: its logs also go up compacted into the events table
    (Parquet), which a report in place reads instead of a log per node, with the same metrics as a
    report of the logs. A table that is not what the manifest recorded (an object changed) is not
    trusted: the logs are read again and the table rewritten."""
    result = peerlab("run", "scenarios/quickstart.yaml", "--backend", "sim", "--no-report",
                     "--set", "output.store=s3://peerlab/compact", timeout=300,
                     env={**os.environ, "PEERLAB_CACHE": str(tmp_path / "writer")})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "events into analysis/tables/events (Parquet)" in result.stderr
    run_id = Path(result.stdout.strip().splitlines()[-1]).name
    prefix = f"compact/{run_id}/analysis/tables/events/"
    parts = [o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix=prefix)["Contents"]
             if o["Key"].endswith(".parquet")]
    assert parts and all(f"/run={run_id}/" in k for k in parts)

    def report(cache: str) -> tuple[str, dict]:
        done = peerlab("report", f"s3://peerlab/compact/{run_id}", timeout=300,
                       env={**os.environ, "PEERLAB_CACHE": str(cache_with_jars(tmp_path / cache))})
        assert done.returncode == 0, done.stderr[-2000:]
        reader = tmp_path / cache / "s3" / "peerlab" / "compact" / run_id
        return " ".join(done.stderr.split()), json.loads((reader / "analysis" / "metrics.json").read_text())

    said, compacted = report("reader")
    assert "compacted into Parquet" in said and "read from analysis/tables/events" in said, said
    assert compacted["events"] > 50_000 and compacted["delivery_ratio"] == 1.0
    # one of the table's objects replaced: not the one the manifest recorded, so the logs are read
    s3_endpoint.put_object(Bucket="peerlab", Key=parts[0], Body=b"not what was stored")
    said, from_logs = report("second-reader")
    assert "compacted into Parquet" not in said and "logs converted into" in said, said
    for key in sorted(set(compacted) - {"ingest"}):
        assert from_logs.get(key) == compacted[key], key
    # that report wrote the table again and put up its stamp: the next one reads the table
    said, again = report("third-reader")
    assert "compacted into Parquet" in said and again.get("events") == compacted["events"], said
