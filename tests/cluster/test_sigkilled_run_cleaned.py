"""An orchestrator SIGKILLed while its pods run, and `peerlab clean --kubernetes`: its release, pods,
lease and files removed, while a second run in the same namespace, by an unprivileged user, completes."""
from __future__ import annotations

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
from orchestrator.record.host_state import STATE_DIR, scratch_root
from tests.cluster.support import AS_NOBODY, NAMESPACE, NOBODY, delay_lines, kubectl, nobodys_home
from tests.support.cli import ROOT, peerlab

pytestmark = [pytest.mark.emulation, pytest.mark.cluster, pytest.mark.slow, pytest.mark.exclusive]


def test_clean_after_a_sigkilled_orchestrator_leaves_nothing_of_the_run(request, cluster, tmp_path, spark):
    """An orchestrator killed with SIGKILL while its pods run leaves its release; `peerlab clean
    --kubernetes` sees its lease's holder is gone (same host, no such process) and removes the
    release, its pods, service, config map, secret and lease. A second run in the same namespace,
    started meanwhile by an unprivileged user (user nobody: no root, no capability, its state directory
    in its own home), is left alone and completes: ci-smoke whole, its shaping, calibration, clock
    offsets, kill/restart and partition acting in the pods, every log collected, nothing of it left."""
    state, env = cluster
    scenario = tmp_path / "ci-smoke.yaml"
    scenario.write_text((ROOT / "scenarios" / "ci-smoke.yaml").read_text().replace(
        "file://./runs", f"file://{tmp_path}/runs"))
    home, users_env = nobodys_home(request, env, "ci-smoke.yaml")

    def orchestrator(as_nobody: bool = False) -> subprocess.Popen:
        argv = [sys.executable, "-m", "orchestrator.cli", "run", str(home / "ci-smoke.yaml" if as_nobody else scenario),
                "--backend", "kubernetes", "--no-report"]
        return subprocess.Popen([*AS_NOBODY, *argv] if as_nobody else argv, cwd=ROOT,
                                env=users_env if as_nobody else {**os.environ, **env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def pods(*selector: str) -> list[dict]:
        return json.loads(kubectl(env, "get", "pods", "-n", NAMESPACE, "-l", ",".join(["peerlab.run", *selector]),
                                  "-o", "json").stdout)["items"]

    killed = orchestrator()
    deadline = time.monotonic() + 300
    while len(running := [p for p in pods() if p["status"]["phase"] == "Running"]) < 8:
        assert killed.poll() is None, killed.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(1)
    assert all([c["name"] for c in p["spec"]["containers"]] == ["node"] for p in running)  # no shaper in a pod
    short = running[0]["metadata"]["labels"]["peerlab.run"]
    deadline = time.monotonic() + 120
    while not any(delay_lines(env).values()):  # the daemons' lines, once the run shapes
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(1)
    other = orchestrator(as_nobody=True)
    deadline = time.monotonic() + 300
    while len([p for p in pods(f"peerlab.run!={short}") if p["status"]["phase"] == "Running"]) < 8:
        assert other.poll() is None, other.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(1)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert kubectl(env, "get", "leases", "-n", NAMESPACE, "-o", "name").stdout.count(f"pl{short}") == 1
    tmp = Path(tempfile.gettempdir())
    (credentials,) = tmp.glob(f"peerlab-kube-{killed.pid}-*")  # its TLS key, left by the SIGKILL

    done = peerlab("clean", "--kubernetes", "--namespace", NAMESPACE, env={**os.environ, **env}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "no such process on this host" in " ".join(done.stderr.split())
    assert not credentials.exists() and list(tmp.glob(f"peerlab-kube-{other.pid}-*"))  # the live one's kept
    assert not (STATE_DIR / f"{short}.json").exists()  # nor the dead run's state file here
    assert not (scratch_root() / short).exists()  # nor its scratch directory (the release's values, its token)
    (killed_dir,) = (tmp_path / "runs").glob(f"*-{short}")
    assert json.loads((killed_dir / "status").read_text())["status"] == "crashed"
    left = kubectl(env, "get", "statefulsets,pods,services,configmaps,secrets,leases", "-n", NAMESPACE,
                   "-l", f"peerlab.run={short}", "-o", "name").stdout.split()
    helm_secrets = kubectl(env, "get", "secrets", "-n", NAMESPACE, "-l", f"owner=helm,name=pl{short}",
                           "-o", "name").stdout.split()
    leases = kubectl(env, "get", "leases", "-n", NAMESPACE, "-o", "name").stdout
    assert left == [] and helm_secrets == [] and f"pl{short}" not in leases
    # the other run, untouched: it goes on to its end
    out, err = other.communicate(timeout=600)
    assert other.returncode == 0, err.decode()[-3000:]
    run_dir = Path(out.decode().strip().splitlines()[-1])
    assert run_dir.parent == home / "runs" and run_dir.stat().st_uid == NOBODY.pw_uid
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and not manifest["run_id"].endswith(short)
    assert not list(tmp.glob(f"peerlab-kube-{other.pid}-*"))  # removed by its orchestrator as it ended
    # ci-smoke's steps, acted inside the unprivileged user's pods by the shaping daemons
    assert "ifb" in manifest["shaping"]["bandwidth"] and "cluster node" in manifest["shaping"]["probe"], manifest["shaping"]
    clock = manifest["clock"]
    assert clock["method"].startswith("NTP-style") and set(clock["offsets_ns"]) == {f"n{i}" for i in range(8)}
    assert [(f["action"], f.get("node")) for f in manifest["faults_executed"]] == [
        ("kill", "n7"), ("restart", "n7"), ("partition", None), ("heal", None)]
    cal = manifest["calibration"]
    assert len(cal["rtt"]) == 4 and len(cal["throughput"]) == 2
    for r in cal["throughput"]:  # download capped on the pod's ifb, upload on its eth0: no round above the cap
        # (the rate reached is the quickstart test's to assert: here the killed run's pods and the clean
        # share the 2 cores with these rounds, and one measured 39 Mbit/s in CI)
        assert 0 < min(r["rounds_mbit"]) <= 55.0 and max(r["rounds_mbit"]) <= 55.0, r
    for r in cal["rtt"]:  # the quickest ping: never under the shaped delay (its precision is the quickstart
        # test's to assert: here the killed run's pods still run beside these pings; one CI run's quickest
        # of a pair was 48.7 ms for 40, its median 120)
        assert 40.0 - 1 <= r["min_ms"] <= 2 * 40.0, r
    assert len(list((run_dir / "events").glob("n*.jsonl.gz"))) == 8
    assert (run_dir / "events" / "n7.jsonl.gz").stat().st_size > 0  # the killed node's log, both its lives
    metrics = analyse(run_dir, spark)
    print("ci-smoke on the cluster by user nobody:", json.dumps({k: metrics[k] for k in
                                                                ("messages", "delivery_ratio", "latency_ms")}))
    assert metrics["messages"] == 64
    assert metrics["delivery_ratio"] >= 0.9  # the only losses: what n7 missed while down
    assert 20.0 <= metrics["latency_ms"]["p50"] <= 35.0  # over 20 ms links
    # the state directory is the user's own, and the run's lease in it is gone
    users_state = home / ".local" / "state" / "peerlab"
    assert users_state.is_dir() and users_state.stat().st_uid == NOBODY.pw_uid
    assert [p for p in users_state.rglob("*") if p.is_file()] == []
    assert kubectl(env, "get", "pods,leases", "-n", NAMESPACE, "-l", "peerlab.run", "-o", "name").stdout == ""
    # and nothing of either in the shaping daemons: the exec streams ended with their orchestrators, and
    # with them each node's agent and delay line
    deadline = time.monotonic() + 60
    while any(delay_lines(env).values()) and time.monotonic() < deadline:
        time.sleep(1)
    assert not any(delay_lines(env).values()), delay_lines(env)
