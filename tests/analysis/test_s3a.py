"""Spark reading event logs from, and writing a table to, the bundled S3 server through s3a
(analysis/s3a.py: the jars from Maven Central, the settings from boto3's environment)."""
import gzip
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

from analysis import s3a
from tests.support.cli import ROOT, patient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

READ_AND_WRITE = """
import json
from analysis import s3a
from analysis.ingest import event_struct
from analysis.spark import get_spark, stop_and_wait

spark = get_spark("local[1]", conf=s3a.conf(fetch=False), input_bytes=0)
events = spark.read.schema(event_struct()).json("s3a://peerlab/s3a/r1/events/*.jsonl.gz")
events.write.mode("overwrite").parquet("s3a://peerlab/s3a/r1/analysis/tables/events")
back = spark.read.parquet("s3a://peerlab/s3a/r1/analysis/tables/events")
print(json.dumps({"count": events.count(), "nodes": sorted(r[0] for r in events.select("node").distinct().collect()),
                  "bytes": back.groupBy().sum("bytes").collect()[0][0]}), flush=True)
stop_and_wait(spark)  # the JVM is gone before this process is (it raises if the JVM will not exit)
"""


def test_spark_reads_logs_and_writes_a_table_in_s3_through_s3a(s3_endpoint):
    sent = 0
    for node, count in (("n0", 300), ("n1", 200)):
        lines = [{"ts": 1_000_000 * i, "node": node, "type": "send_rpc", "peer": "n9", "bytes": 100 + i}
                 for i in range(count)]
        sent += sum(e["bytes"] for e in lines)
        body = gzip.compress("".join(json.dumps(e) + "\n" for e in lines).encode())
        s3_endpoint.put_object(Bucket="peerlab", Key=f"s3a/r1/events/{node}.jsonl.gz", Body=body)
    done = subprocess.run([sys.executable, "-c", READ_AND_WRITE], capture_output=True, text=True,
                          timeout=patient(300), cwd=ROOT, env={**os.environ, "PEERLAB_CACHE": os.path.expanduser("~/.cache/peerlab")})
    # the JVM's messages without their stack frames: a failure's cause, not the tail of its trace
    assert done.returncode == 0, "\n".join(l for l in done.stderr.splitlines() if not l.startswith("\tat "))[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"count": 500, "nodes": ["n0", "n1"], "bytes": sent}
    keys = [o["Key"] for o in s3_endpoint.list_objects_v2(Bucket="peerlab", Prefix="s3a/r1/analysis/")["Contents"]]
    assert any(k.endswith(".parquet") for k in keys), keys


def test_the_cut_sdk_keeps_every_service_s3a_and_the_kept_clients_name():
    """The SDK bundle cut to S3A_SERVICES (analysis/s3a.py) keeps every AWS service whose classes
    hadoop-aws, the analytics accelerator, the kept services' clients and the S3 Access Grants plugin
    name: none of them can meet a class the cut removed."""
    hadoop_aws, cut, accelerator = s3a.ensure_jars(fetch=False)
    assert cut.name.endswith("-s3a.jar") and cut.stat().st_size < 40e6, cut
    with zipfile.ZipFile(cut) as z:
        entries = sorted(z.namelist())
        users = [z.read(n) for n in entries if n.endswith(".class") and
                 n.startswith(tuple(f"{s3a.SERVICES}{s}/" for s in s3a.S3A_SERVICES) + ("software/amazon/awssdk/s3accessgrants/",))]
    assert {n.split("/")[4] for n in entries if n.startswith(s3a.SERVICES) and n.count("/") > 4} == set(s3a.S3A_SERVICES)
    for jar in (hadoop_aws, accelerator):
        with zipfile.ZipFile(jar) as z:
            users += [z.read(n) for n in z.namelist() if n.endswith(".class")]
    named = {m.decode() for body in users for m in re.findall(rb"software/amazon/awssdk/[A-Za-z0-9_/$]+", body)}
    assert len(named) > 1000
    # every service they name (its clients, model classes, endpoint rules) is one the cut kept
    services = {n[len(s3a.SERVICES):].split("/")[0] for n in named if n.startswith(s3a.SERVICES) and n.count("/") > 4}
    assert services == set(s3a.S3A_SERVICES), sorted(services ^ set(s3a.S3A_SERVICES))


def test_cutting_the_bundle_drops_only_the_other_services(tmp_path):
    whole = tmp_path / "bundle-1.jar"
    kept = [f"{s3a.SERVICES}s3/S3Client.class", f"{s3a.SERVICES}sts/StsClient.class", "software/amazon/awssdk/core/Sdk.class",
            "META-INF/MANIFEST.MF", f"{s3a.SERVICES}s3/", "software/amazon/awssdk/services/"]
    dropped = [f"{s3a.SERVICES}ec2/Ec2Client.class", f"{s3a.SERVICES}ec2/", f"{s3a.SERVICES}s3tables/S3TablesClient.class"]
    with zipfile.ZipFile(whole, "w", zipfile.ZIP_DEFLATED) as z:
        for name in kept + dropped:
            z.writestr(name, b"" if name.endswith("/") else name.encode() * 50)
    s3a.cut_bundle(whole, tmp_path / "cut.jar")
    with zipfile.ZipFile(tmp_path / "cut.jar") as z:
        assert z.namelist() == kept
        assert all(z.read(n) == (b"" if n.endswith("/") else n.encode() * 50) for n in kept)
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    assert not list(tmp_path.glob(".cut.jar.*"))


def test_a_cache_holding_the_whole_bundle_is_cut_on_first_use_without_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path))
    jars = s3a.jar_dir()
    jars.mkdir(parents=True)
    for group, artifact, version in s3a.JARS[s3a.hadoop_version()]:
        with zipfile.ZipFile(jars / f"{artifact}-{version}.jar", "w") as z:
            z.writestr(f"{s3a.SERVICES}s3/S3Client.class", b"s3")
            z.writestr(f"{s3a.SERVICES}ec2/Ec2Client.class", b"ec2")
    paths = s3a.ensure_jars(fetch=False)
    assert [p.name for p in paths] == [p.name for p in s3a.ensure_jars(fetch=False)]
    cut = next(p for p in paths if p.name.startswith("bundle-"))
    assert cut.name.endswith("-s3a.jar") and sorted(p.name for p in jars.iterdir()) == sorted(p.name for p in paths)
    with zipfile.ZipFile(cut) as z:
        assert z.namelist() == [f"{s3a.SERVICES}s3/S3Client.class"]
