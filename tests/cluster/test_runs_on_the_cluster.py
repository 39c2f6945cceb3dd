"""Scenarios run on the local cluster with --backend kubernetes: the README's quickstart into the
cluster's own S3 store, reported from there (in place through s3a, then as a Spark application on the
cluster), one node's clock shifted; a report's Spark session on the cluster taking task results over
1 MiB; gossipsub-mixed with the four libp2p implementations' images."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from analysis.job import analyse
from orchestrator.cluster import layout as L
from orchestrator.cluster import store_release as store
from tests.cluster.support import NAMESPACE, NODES, assert_spread, kubectl, run_on_cluster, store_client
from tests.support import mixed
from tests.support.adapters import ADAPTERS, require_adapters
from tests.support.cli import ROOT, cache_with_jars, peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]


SHIFTED = "peerlab-worker"
SHIFT_NS = 250_000_000


def test_quickstart_on_the_local_cluster_into_its_store_and_reported_from_there(cluster, tmp_path):
    """The README's quickstart, unchanged, on --backend kubernetes: 30 pods of the chart, without any
    capability, spread over the three cluster nodes; every link shaped from outside the pods by the
    shaping daemon of its node and calibrated; every message delivered; the verdict faithful (one delay
    line per cluster node, at real-time priority).
    One cluster node's clock reads 250 ms ahead (the chart's clockShiftNs moves it for every node
    there): the run measures that node's offset, the manifest records it, and the report's latencies
    stay right. Its logs go to the cluster's own S3 store (the peerlab-store release `cluster up`
    installed) and the report is made from there: Spark reads them in place through s3a, in this
    process and then as a Spark application whose executors are pods on the workers (`--master k8s`)."""
    state, env = cluster
    s3 = store.credentials(state)
    writer = {**os.environ, **env, **s3, "PEERLAB_CACHE": str(tmp_path / "writer"),
              "PEERLAB_K8S_CLOCK_SHIFTS": json.dumps({SHIFTED: SHIFT_NS})}
    run_dir = run_on_cluster(writer, ROOT / "scenarios" / "quickstart.yaml", tmp_path,
                             "--set", "output.store=s3://peerlab/cluster-tests")
    run_id = run_dir.name
    reader_cache = cache_with_jars(tmp_path / "reader")
    report = peerlab("report", f"s3://peerlab/cluster-tests/{run_id}", timeout=900,
                     env={**os.environ, **s3, "PEERLAB_CACHE": str(reader_cache)})
    assert report.returncode == 0, report.stderr[-3000:]
    assert "through s3a" in report.stderr
    reader = reader_cache / "s3" / "peerlab" / "cluster-tests" / run_id
    assert not (reader / "events").exists()  # read where they lie, not copied
    objects = store_client(s3).list_objects_v2(Bucket="peerlab", Prefix=f"cluster-tests/{run_id}/")["Contents"]
    keys = {o["Key"].split("/", 2)[2] for o in objects}
    assert {f"events/n{i}.jsonl.gz" for i in range(30)} <= keys and "analysis/metrics.json" in keys

    manifest = json.loads((reader / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
    assert_spread(manifest)  # 10 pods on each of the 3 cluster nodes
    assert manifest["fidelity"]["verdict"] == "faithful", manifest["fidelity"]
    line = manifest["shaping"]["delay_line"]  # the three daemons' lines, their counts added up
    assert sorted(line["packets"]) == sorted(f"n{i}" for i in range(30)) and line["errors"] == []
    # the shifted node's offset measured as such (within the method's error through the API server)
    clock = manifest["clock"]
    for machine, members in clock["machines"].items():
        shift = SHIFT_NS if machine == SHIFTED else 0
        assert abs(clock["offsets_ns"][members[0]] - shift) <= clock["max_error_ns"] + 2_000_000, (machine, clock)
    cal = manifest["calibration"]
    assert len(cal["rtt"]) == 8 and len(cal["throughput"]) == 2
    assert all(r["ok"] for r in cal["throughput"]), cal
    # the quickest of each pair's pings: the shaping's own delay (30 pods on 2 cores only add to the median)
    assert all(abs(r["min_ms"] - r["configured_ms"]) <= 0.1 * r["configured_ms"] + 1 for r in cal["rtt"]), cal
    metrics = json.loads((reader / "analysis" / "metrics.json").read_text())
    print("quickstart on the local cluster:", json.dumps({k: metrics[k] for k in
                                                         ("messages", "delivery_ratio", "latency_ms")}),
          cal["latency_error_pct"], cal["bandwidth_error_pct"])
    assert metrics["delivery_ratio"] == 1.0
    assert 50.0 <= metrics["latency_ms"]["p50"] <= 80.0  # one hop of 50 ms; the rest is 2 cores' queue
    # the offsets taken out (one of them 250 ms): no delivery before its 50 ms link, less the error of the
    # two offsets (sender's and receiver's) the manifest states; that error well under the link's delay
    error_ms = clock["max_error_ns"] / 1e6
    print("clock offsets' stated error:", error_ms, "ms")
    # (best of 5 round trips through the API server's proxy, on 2 cores with 30 pods: 2-13 ms seen; under
    # 20, the check below still shows the 50 ms link: no delivery in under 10 ms)
    assert error_ms <= 20.0, clock
    assert metrics["latency_ms"]["min"] >= 50.0 - 2 * error_ms, (metrics["latency_ms"], clock)
    # every pod's link counters, read inside the pods: what the sockets carried from T0 on is what the
    # nodes logged they sent (the probes of the fidelity watch and the headers' options on top)
    assert manifest["kernel_traffic"]["where"].startswith("each pod's eth0")
    kernel = metrics["kernel_traffic"]
    print("kernel traffic on the local cluster:", json.dumps(kernel), manifest["kernel_traffic"])
    assert kernel["nodes"] == 30
    assert 0.98 <= kernel["payload_over_logged"] <= 1.1, kernel
    left = kubectl(env, "get", "pods,services,configmaps,leases", "-n", NAMESPACE, "-l", "peerlab.run", "-o", "name")
    assert left.stdout.strip() == ""

    # the same report as a Spark application on the cluster: the driver here, its executors pods of
    # peerlab's Spark image on the two workers, reading the logs where they lie in the cluster's store
    # and writing the tables back there; the same metrics; nothing of it left
    k8s_cache = cache_with_jars(tmp_path / "k8s-reader")
    on_cluster = {**os.environ, **env, **s3, "PEERLAB_CACHE": str(k8s_cache)}
    report = peerlab("report", f"s3://peerlab/cluster-tests/{run_id}", "--master", "k8s", timeout=900, env=on_cluster)
    assert report.returncode == 0, report.stderr[-3000:]
    print(report.stderr[-1200:])
    there = k8s_cache / "s3" / "peerlab" / "cluster-tests" / run_id / "analysis"
    assert json.loads((there / "metrics.json").read_text()) == metrics
    timings = json.loads((there / "timings.json").read_text())
    assert timings["master"].startswith("k8s://https://"), timings["master"]
    assert sorted(e["node"] for e in timings["executors"]) == L.node_names(NODES)[1:], timings["executors"]
    assert all(e["pod"].startswith("peerlab-report-") for e in timings["executors"])
    assert kubectl(env, "get", "pods,secrets", "-n", NAMESPACE, "-l", "peerlab.report", "-o", "name").stdout == ""

    # a report whose driver is SIGKILLed: `peerlab clean --kubernetes` removes what it left on the cluster
    killed = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "report", f"s3://peerlab/cluster-tests/{run_id}",
                               "--master", "k8s"], cwd=ROOT, env=on_cluster, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while "Running" not in kubectl(env, "get", "pods", "-n", NAMESPACE, "-l", "peerlab.report",
                                   "-o", "jsonpath={.items[*].status.phase}").stdout:
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(1)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    done = peerlab("clean", "--kubernetes", "--namespace", NAMESPACE, env={**os.environ, **env}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "its executors and Secret removed" in " ".join(done.stderr.split()), done.stderr
    assert kubectl(env, "get", "pods,secrets", "-n", NAMESPACE, "-l", "peerlab.report", "-o", "name").stdout == ""
    assert not list(Path(tempfile.gettempdir()).glob("peerlab-report-*.json"))


# a task result over Spark's default 1 MiB from each of the two executors; asked of a session made as
# a report's (`peerlab report --master k8s`) in a process of its own (this one may hold a local session)
LARGE_RESULTS = """
import sys
from orchestrator import spark_on_k8s
from orchestrator.cli.common import _end_on_cluster
from orchestrator.backends.kube_cluster import settings
from analysis.spark import get_spark

opts = settings()
cluster = spark_on_k8s.prepare("k8s", opts["namespace"], opts["context"], {}, print)
try:
    spark = get_spark(cluster.master, conf=cluster.conf)
    # digests, which no compression shrinks much: about 12 MB from each task
    rows = spark.range(0, 400_000, numPartitions=2).selectExpr("id", "sha2(CAST(id AS string), 256) AS digest").collect()
    print("collected", len(rows), sum(r.id for r in rows), {r.id: r.digest for r in rows}[345_678])
finally:  # as a report ends: the session stopped, then its Secret and any executor left deleted
    _end_on_cluster(cluster)
"""


def test_a_task_result_over_a_mebibyte_reaches_the_driver_outside_the_pod_network(cluster):
    """A report on the cluster whose tasks return more than 1 MiB each (the marks of a 109 M-event run
    did): the driver runs here, outside the pod network, where it cannot fetch a result from an
    executor's block manager; the result comes back on the executor's own connection instead."""
    state, env = cluster
    try:
        done = subprocess.run([sys.executable, "-c", LARGE_RESULTS], cwd=ROOT, capture_output=True, text=True,
                              timeout=900, env={**os.environ, **env, **store.credentials(state)})
    except subprocess.TimeoutExpired:  # killed: what it made in the cluster removed as a user would
        peerlab("clean", "--kubernetes", "--namespace", NAMESPACE, env={**os.environ, **env}, timeout=300)
        raise
    assert done.returncode == 0, done.stderr[-3000:]
    n = 400_000
    digest = hashlib.sha256(b"345678").hexdigest()
    assert f"collected {n} {n * (n - 1) // 2} {digest}" in done.stdout, done.stdout[-2000:]
    assert kubectl(env, "get", "pods,secrets", "-n", NAMESPACE, "-l", "peerlab.report", "-o", "name").stdout == ""
    assert not list(Path(tempfile.gettempdir()).glob("peerlab-report-*.json"))


def test_gossipsub_mixed_on_the_local_cluster(cluster, tmp_path, spark):
    """go-, rust-, js- and py-libp2p nodes in pods of their own images, through the delay line in each pod,
    with the scenario's kills, restarts and partition: every message reaches every node that was up."""
    require_adapters()
    state, env = cluster
    run_dir = run_on_cluster(env, ROOT / "scenarios" / "gossipsub-mixed.yaml", tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    # the chart's topology spread: each implementation's three pods one on each cluster node, so every
    # implementation's messages cross the overlay (the manifest records which pod ran where)
    assert_spread(manifest)
    # a node of each implementation killed and restarted 2 s later: how long a restart takes decides the order
    assert sorted(f["action"] for f in manifest["faults_executed"]) == ["heal", *["kill"] * 4, "partition",
                                                                         *["restart"] * 4]
    metrics = analyse(run_dir, spark)
    print("gossipsub-mixed on the local cluster:", json.dumps({k: metrics.get(k) for k in
                                                              ("messages", "delivery_ratio", "delivery_ratio_up")}))
    # every node never killed got every message published after its publisher's first second up (as
    # tests/emulation/test_libp2p_adapters.py asks of the local backend)
    events = {}
    for log in (run_dir / "events").glob("n*.jsonl.gz"):
        with gzip.open(log, "rt") as f:
            events[log.name.split(".")[0]] = [json.loads(line) for line in f if line.strip()]
    assert mixed.missed_by_nodes_never_killed(manifest, events) == {}
    # with the restarted ones, from their first connection on: on 2 cores the cluster is saturated
    # (verdict UNFAITHFUL: a py-libp2p pod's restart took 9-11 s, the partition came 9 s late) and one
    # run of two missed one delivery to a py node 170 ms after it first connected (0.9985)
    assert metrics["delivery_ratio_up"] >= 0.99
    # each killed node restarted in its own pod (its supervisor started it again: two starts in one log)
    for fault in manifest["faults_executed"]:
        if fault["action"] == "kill":
            assert [e["type"] for e in events[fault["node"]]].count("start") == 2, fault
    # every pod's packets went through its cluster node's delay line, none refused
    line = manifest["shaping"]["delay_line"]
    assert sorted(line["packets"]) == sorted(f"n{i}" for i in range(12)) and line["errors"] == []
    assert min(line["packets"].values()) > 100, line["packets"]
    # delayed: no delivery quicker than one 25 ms link (the three kind nodes read one clock)
    published = {e["msg_id"]: e for evs in events.values() for e in evs if e["type"] == "publish_message"}
    delivered = [e for evs in events.values() for e in evs if e["type"] == "deliver_message"]
    assert min(e["ts"] - published[e["msg_id"]]["ts"] for e in delivered) >= 0.9 * 25e6
    # across implementations: each one's nodes took first copies from another's, and gave them
    implementation = {n["id"]: n["implementation"] for n in manifest["plan"]["nodes"]}
    crossings = {(implementation[e["peer"]], implementation[e["node"]]) for e in delivered}
    for name in ADAPTERS:
        assert any(b == name != a for a, b in crossings) and any(a == name != b for a, b in crossings), (name, crossings)
