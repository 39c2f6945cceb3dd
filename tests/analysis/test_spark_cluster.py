"""The cluster path: `peerlab report --master spark://...` against a real standalone Spark cluster
(a master and one worker started here from the pyspark installation), on a run directory every
executor can read (same machine). The metrics must equal the local[*] analysis."""
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyspark
import pytest

from analysis.job import analyse
from tests.support.cli import patient, peerlab
from tests.support.runs import write_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + patient(timeout)
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise AssertionError(f"{path.name} never said {text!r}:\n" + path.read_text(errors="replace")[-2000:])


@pytest.fixture
def cluster(tmp_path):
    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"}
    port = _free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    spark_class = str(home / "bin" / "spark-class")
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", "0"], env=env,
                              stdout=master_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)]
    try:
        _wait_for(master_log, "I have been elected leader")
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--cores", "1",
             "--memory", "1g", "--webui-port", "0", "--work-dir", str(tmp_path / "work")], env=env,
            stdout=worker_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for(master_log, "Registering worker")
        yield f"spark://127.0.0.1:{port}", master_log
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(timeout=patient(30))


def test_report_on_a_standalone_cluster_equals_the_local_analysis(tmp_path, cluster, spark):
    master, master_log = cluster
    run = tmp_path / "run"
    write_run(run)
    out = peerlab("report", str(run), "--master", master, "--spark-conf", "spark.executor.memory=512m")
    assert out.returncode == 0, out.stderr[-3000:]
    on_cluster = json.loads((run / "analysis" / "metrics.json").read_text())
    text = master_log.read_text()
    assert "Registered app peerlab-analysis" in text and "Launching executor" in text
    analyse(run, spark)  # on this worker's local session
    local = json.loads((run / "analysis" / "metrics.json").read_text())
    assert on_cluster == local
    assert on_cluster["delivery_ratio"] == pytest.approx(6 / 7)


def test_spark_conf_must_be_key_value(tmp_path):
    run = tmp_path / "run"
    write_run(run)
    out = peerlab("report", str(run), "--spark-conf", "spark.executor.memory")
    assert out.returncode == 2
    assert "--spark-conf 'spark.executor.memory': write KEY=VALUE" in out.stderr
