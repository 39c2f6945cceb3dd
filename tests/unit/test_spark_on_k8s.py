"""A report's Spark on Kubernetes, the parts that need no cluster: the executor image's entry point
turns the environment Spark gives an executor pod into the executor backend's command line (and
names what is missing), the executors' pod template meets Pod Security `restricted`, s3a's jars stay
off the wire, and `--master k8s` asks for a run in an object store. On the cluster itself:
tests/cluster/test_runs_on_the_cluster.py (the quickstart's report)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import spark_on_k8s
from orchestrator.builds import spark_executor_entry as entry
from tests.support.cli import ROOT, peerlab

POD_ENV = {"SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@172.19.0.1:41000", "SPARK_EXECUTOR_ID": "2",
           "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "spark-abc", "SPARK_EXECUTOR_POD_IP": "10.244.1.7",
           "SPARK_EXECUTOR_MEMORY": "1024m", "SPARK_RESOURCE_PROFILE_ID": "0",
           "SPARK_EXECUTOR_POD_NAME": "peerlab-report-1a2b3c-exec-2",
           "SPARK_JAVA_OPT_1": "-Dspark.driver.port=41000", "SPARK_JAVA_OPT_0": "-Djava.net.preferIPv6Addresses=false",
           "SPARK_JAVA_OPT_10": "-Dlast", "SPARK_CLASSPATH": "/extra/*"}


def test_the_executor_command_line_is_the_pods_environment_in_order():
    argv = entry.command(POD_ENV)
    assert argv[:4] == ["java", "-Djava.net.preferIPv6Addresses=false", "-Dspark.driver.port=41000", "-Dlast"]
    assert argv[4:6] == ["-Xms1024m", "-Xmx1024m"] and argv[6:8] == ["-cp", "/extra/*:/opt/spark/jars/*"]
    assert argv[8] == entry.BACKEND
    options = dict(zip(argv[9::2], argv[10::2]))
    assert options == {"--driver-url": POD_ENV["SPARK_DRIVER_URL"], "--executor-id": "2", "--cores": "1",
                       "--app-id": "spark-abc", "--hostname": "10.244.1.7", "--resourceProfileId": "0",
                       "--podName": "peerlab-report-1a2b3c-exec-2"}


def test_the_entry_point_names_what_spark_did_not_set_and_refuses_anything_but_executor():
    env = {k: v for k, v in POD_ENV.items() if k not in ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_POD_IP")}
    with pytest.raises(KeyError, match="SPARK_DRIVER_URL, SPARK_EXECUTOR_POD_IP"):
        entry.command(env)
    done = subprocess.run([sys.executable, str(Path(entry.__file__))], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "the argument `executor`" in done.stderr
    done = subprocess.run([sys.executable, str(Path(entry.__file__)), "executor"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "not set: SPARK_DRIVER_URL" in done.stderr


def test_the_executors_pod_template_is_restricted_and_on_the_named_nodes(tmp_path):
    path = Path(spark_on_k8s._pod_template("1a2b3c", required_nodes=["peerlab-worker", "peerlab-worker2"]))
    try:
        spec = json.loads(path.read_text())["spec"]
    finally:
        path.unlink()
    assert spec["automountServiceAccountToken"] is False
    pod, (container,) = spec["securityContext"], spec["containers"]
    assert pod["runAsNonRoot"] and pod["runAsUser"] != 0 and pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == ["peerlab-worker", "peerlab-worker2"]
    spread = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert spread["podAffinityTerm"]["labelSelector"]["matchLabels"] == {spark_on_k8s.LABEL: "1a2b3c"}
    anywhere = Path(spark_on_k8s._pod_template("1a2b3d", required_nodes=[]))
    try:
        assert "nodeAffinity" not in json.loads(anywhere.read_text())["spec"]["affinity"]
    finally:
        anywhere.unlink()


def test_the_s3a_jars_go_on_the_drivers_class_path_not_to_the_executors():
    conf = spark_on_k8s.with_s3a_jars_in_image({"spark.jars": "/c/a.jar,/c/b.jar", "spark.hadoop.fs.s3a.endpoint": "x"})
    assert conf == {"spark.driver.extraClassPath": "/c/a.jar:/c/b.jar", "spark.hadoop.fs.s3a.endpoint": "x"}
    assert spark_on_k8s.wants_k8s("k8s") and spark_on_k8s.wants_k8s("k8s://https://h:6443")
    assert not spark_on_k8s.wants_k8s("local[*]") and not spark_on_k8s.wants_k8s("spark://h:7077")


def test_master_k8s_asks_for_a_run_in_an_object_store(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"run_id": "r1", "plan": {"protocol": "floodsub", "nodes": []}}))
    done = peerlab("report", str(run_dir), "--master", "k8s", cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--master k8s" in done.stderr and "s3://BUCKET/PREFIX/RUN_ID" in done.stderr
