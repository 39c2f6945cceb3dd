"""A signal during `peerlab report` stops the analysis within seconds: Spark's JVM ends with it, no
traceback, exit 130, the run untouched, nothing left in the temporary directory; the next report of
the run works."""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.job import analyse
from orchestrator.procfs import descendants
from tests.support.cli import ROOT, patient

pytestmark = [pytest.mark.spark, pytest.mark.slow]
STORED = Path(__file__).parent / "runs" / "ci-smoke"


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text()}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_analysis_and_its_jvm(tmp_path: Path, sig, spark):
    run_dir = tmp_path / "run"
    shutil.copytree(STORED, run_dir, ignore=shutil.ignore_patterns("analysis", "expected-metrics.json"))
    scratch = tmp_path / "tmp"  # the report's temporary directory
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "report", str(run_dir)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch)})
    seen, deadline = "", time.monotonic() + patient(120)
    while "analysis: session" not in seen:  # the session is up: the analysis is under way
        assert time.monotonic() < deadline and proc.poll() is None, seen
        if select.select([proc.stderr], [], [], 1)[0]:
            seen += proc.stderr.readline()
    jvm = descendants(proc.pid)
    assert jvm, "no Spark JVM under the report"
    java = [Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in jvm if Path(f"/proc/{p}").exists()]
    java = [args for args in java if args[0].endswith(b"java") and b"org.apache.spark.deploy.SparkSubmit" in args]
    assert java and any(a.startswith(f"-Djava.io.tmpdir={scratch}/".encode()) for a in java[0]), java
    assert any(a.startswith(f"spark.local.dir={scratch}/".encode()) for a in java[0]), java[0]
    signalled = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=patient(60))
    took = time.monotonic() - signalled
    print(f"{sig.name}: exit {proc.returncode} after {took:.1f} s")
    # loose: a busy host slows the JVM's end; that the analysis stopped short is metrics.json's absence
    assert proc.returncode == 130 and took < patient(30), err[-2000:]
    assert "interrupted: the analysis of" in err and "Traceback" not in err, err[-3000:]
    deadline = time.monotonic() + patient(10)  # the JVM ends with the report; the kernel may take a moment to reap it
    while alive(jvm) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(jvm), alive(jvm)
    assert list(scratch.iterdir()) == []  # Spark's blockmgr-* and spark-* directories went with it
    assert not (run_dir / "analysis" / "metrics.json").exists()
    analyse(run_dir, spark)  # what the interrupted report left behind does not stand in the way
    assert (run_dir / "analysis" / "metrics.json").exists()
