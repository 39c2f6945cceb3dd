"""Stores: file:// and s3:// (against a real S3 HTTP endpoint: moto in server mode)."""
import json
from pathlib import Path

import pytest

from orchestrator.model.scenario import parse_scenario
from orchestrator.store import FileStore, S3Store, open_store, split_run_url
from tests.support.cli import peerlab


def test_store_urls():
    assert isinstance(open_store("file:///tmp/x"), FileStore)
    with pytest.raises(ValueError, match="needs a bucket"):
        open_store("s3:///runs")
    with pytest.raises(ValueError, match="file://DIR"):
        open_store("gs://b/runs")
    with pytest.raises(Exception, match="output.store") as err:
        parse_scenario("name: x\noutput: {store: 'gs://b/runs'}\n")
    assert "s3://BUCKET/PREFIX" in str(err.value)


def test_s3_store_uploads_and_fetches_a_run(s3_endpoint, tmp_path: Path, monkeypatch):
    store = open_store("s3://peerlab/team/runs")
    assert isinstance(store, S3Store) and store.url == "s3://peerlab/team/runs"
    log = tmp_path / "n0.jsonl"
    log.write_text('{"type": "start"}\n' * 1000)
    store.write_json("r1", "manifest.json", {"run_id": "r1"})
    store.put_log("r1", "n0", log)
    assert store.sync("r1") == 2
    keys = sorted(o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix="team/")["Contents"])
    assert keys == ["team/runs/r1/events/n0.jsonl.gz", "team/runs/r1/manifest.json"]

    monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path / "elsewhere"))
    again, run_id = split_run_url("s3://peerlab/team/runs/r1")
    local = again.fetch(run_id)
    assert local.is_relative_to(tmp_path / "elsewhere")
    assert json.loads((local / "manifest.json").read_text()) == {"run_id": "r1"}
    assert (local / "events" / "n0.jsonl.gz").read_bytes() == (store.run_dir("r1") / "events" / "n0.jsonl.gz").read_bytes()
    with pytest.raises(FileNotFoundError, match="no such run"):
        again.fetch("r2")


def test_report_of_a_missing_s3_run_says_so(s3_endpoint):
    result = peerlab("report", "s3://peerlab/runs/nope", timeout=60)
    assert result.returncode == 2
    assert "no such run" in result.stderr
