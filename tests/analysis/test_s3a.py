"""Spark reading event logs from, and writing a table to, the bundled S3 server through s3a
(analysis/s3a.py: the jars from Maven Central, the settings from boto3's environment)."""
import gzip
import json
import os
import subprocess
import sys

import pytest

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
