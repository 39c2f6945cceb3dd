"""The kubernetes backend's parts that need no pods: the node supervisor (each pod's main process) as a
real process, the chart's values for a plan (rendered by the real helm), and the errors without a
cluster. Runs on a real cluster: tests/cluster/ (test_runs_on_the_cluster.py and the others)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from orchestrator.backends import kubernetes as k8s_backend
from orchestrator.backends.kube_cluster import CHART, write_values
from orchestrator.builds import node_image as image
from orchestrator.helm import helm_binary
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from tests.support.cli import ROOT, patient
from tests.support.kubeconfig import KUBECONFIG

pytestmark = [pytest.mark.slow]


TOKEN = "t" * 16
ENV = {**os.environ, "PEERLAB_CONTROL_TOKEN": TOKEN}


def serve(directory: Path, env: dict[str, str] = ENV) -> tuple[subprocess.Popen, int]:
    """The supervisor as the pod's main process, on a free port of this host's loopback."""
    proc = subprocess.Popen([sys.executable, "-m", "node.supervisor", "serve", "--dir", str(directory),
                             "--host", "127.0.0.1", "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert "waiting for requests on 127.0.0.1:" in line, line
    return proc, int(line.rsplit(":", 1)[1])


def standbys(parent: int) -> list[int]:
    """The supervisor's ready-made nodes (`python -m node --standby`) among its children."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            if proc.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == parent and \
                    b"--standby" in (proc / "cmdline").read_bytes() and stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def supervisor(port: int, cmd: str, *args: str, stdin: str | None = None, token: str = TOKEN) -> dict:
    """The supervisor's command-line client (as a person in the pod would use it)."""
    out = subprocess.run([sys.executable, "-m", "node.supervisor", cmd, "--port", str(port), *args],
                         input=stdin, capture_output=True, text=True, timeout=patient(60), cwd=ROOT,
                         env={**ENV, "PEERLAB_CONTROL_TOKEN": token})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_supervisor_starts_kills_and_restarts_a_node(tmp_path: Path):
    """The pod's main process: the node is down until started, dies by SIGKILL, comes back with the
    same config; a second start while it runs is refused; SIGTERM takes the node down with it."""
    config = json.dumps({"run_id": "test", "node_id": "n0", "protocol": "floodsub",
                         "listen": {"host": "127.0.0.1", "port": 0}, "event_log": str(tmp_path / "n0.jsonl"),
                         "control": {"token": "t" * 16, "unix": str(tmp_path / "n0.sock")}})
    server, port = serve(tmp_path / "sup")
    try:
        assert supervisor(port, "status") == {"running": False, "pid": None, "starts": 0, "exit_code": None}
        (ready,) = standbys(server.pid)  # imported ahead: the start is a hand-over, not an interpreter start
        assert "wrong bearer token" in supervisor(port, "status", token="x" * 16)["error"]
        first = supervisor(port, "start", stdin=config + "\n")
        assert first["running"] and first["starts"] == 1 and first["pid"] == ready
        assert standbys(server.pid) == [ready]  # that one is the node now; the next is made once it has exited
        assert "is running" in supervisor(port, "start", stdin=config + "\n")["error"]
        assert supervisor(port, "wait", "--timeout", "0.5")["running"]  # still up
        deadline = time.monotonic() + 30
        while not (tmp_path / "n0.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/events?offset=0", headers={"X-Peerlab-Token": TOKEN})
        with urllib.request.urlopen(req, timeout=10) as resp:  # the event log, as the orchestrator collects it
            logged = resp.read()
        assert logged and logged == (tmp_path / "n0.jsonl").read_bytes()[:len(logged)]
        killed = supervisor(port, "kill")
        assert killed["running"] is False and killed["exit_code"] == -9
        deadline = time.monotonic() + 10
        while not (after_kill := standbys(server.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        again = supervisor(port, "start", stdin=config + "\n")
        assert again["running"] and again["starts"] == 2 and [again["pid"]] == after_kill != [first["pid"]]
        pid = again["pid"]
        supervisor(port, "kill")  # a standby again, which the pod's end takes with it
        deadline = time.monotonic() + 10
        while not (spare := standbys(server.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spare and pid not in spare
    finally:
        server.terminate()
        server.wait(15)
    assert server.returncode == 0
    for gone in [pid, *spare]:
        with pytest.raises(ProcessLookupError):
            os.kill(gone, 0)


def test_supervisor_runs_the_groups_command_and_stops_it_with_sigterm(tmp_path: Path):
    """An adapter's pod: the supervisor runs PEERLAB_NODE_COMMAND with the config's path in it, and
    `stop` is a SIGTERM; a command that is not a JSON list is refused by name."""
    # written aside and renamed: the test reads the file as soon as it exists
    script = ("import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(open(sys.argv[1]).read()); "
              "os.replace(sys.argv[1] + '.tmp', sys.argv[1] + '.seen'); time.sleep(60)")
    env = {**ENV, "PEERLAB_NODE_COMMAND": json.dumps([sys.executable, "-c", script, "{config}"])}
    server, port = serve(tmp_path, env)
    try:
        assert supervisor(port, "start", stdin='{"node_id": "n4"}\n')["running"]
        deadline = time.monotonic() + 10
        while not (tmp_path / "config.json.seen").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads((tmp_path / "config.json.seen").read_text()) == {"node_id": "n4"}
        assert supervisor(port, "stop")["running"] in (True, False)  # answered at once
        stopped = supervisor(port, "wait", "--timeout", "10")
        assert stopped["running"] is False and stopped["exit_code"] == -15
    finally:
        server.terminate()
        server.wait(15)
    env["PEERLAB_NODE_COMMAND"] = "node adapter.mjs"
    server, port = serve(tmp_path, env)
    try:
        refused = supervisor(port, "start", stdin='{"node_id": "n4"}\n')
        assert "PEERLAB_NODE_COMMAND must be a JSON list" in refused["error"]
    finally:
        server.terminate()
        server.wait(15)


def test_values_name_the_image_and_counts_by_role(monkeypatch, tmp_path: Path):
    """Attackers get their own StatefulSet; ordinal i of each is the i-th node of that role."""
    monkeypatch.setattr(k8s_backend, "connect", lambda namespace, context: None)  # no cluster is asked
    text = (ROOT / "scenarios" / "topiary-eclipse.yaml").read_text()
    scenario = parse_scenario(text, overrides=[f"output.store=file://{tmp_path}/runs"])
    runner = Runner(scenario, make_plan(scenario), backend="kubernetes")
    try:
        backend = runner.backend
        values = backend.values()
        honest = [n.id for n in scenario_plan(runner) if n.role == "honest"]
        attackers = [n.id for n in scenario_plan(runner) if n.role != "honest"]
        assert values["nodes"]["count"] == len(honest) and values["attackers"]["count"] == len(attackers) > 0
        assert backend.pods[honest[3]].endswith("-nodes-3") and backend.pods[attackers[0]].endswith("-attackers-0")
        assert values["image"]["tag"] == image.image_tag().rpartition(":")[2]
        # the chart takes these values (its schema, real helm) and makes exactly these pods
        values["run"]["short"] = "606e96"  # a short id that helm would read as a number if left bare
        write_values(values, tmp_path / "values.yaml")
        render = subprocess.run([helm_binary(), "template", "r", str(CHART), "-f", str(tmp_path / "values.yaml")],
                                capture_output=True, text=True, timeout=patient(120))
        assert render.returncode == 0, render.stderr
        sets = {d["metadata"]["name"]: d["spec"]["replicas"] for d in yaml.safe_load_all(render.stdout)
                if d and d["kind"] == "StatefulSet"}
        pods = {f"{name}-{i}" for name, replicas in sets.items() for i in range(replicas)}
        assert pods == {p.replace(backend.release, "pl606e96") for p in backend.pods.values()}
    finally:
        shutil.rmtree(runner.scratch, ignore_errors=True)


def scenario_plan(runner: Runner):
    return runner.plan.nodes




def test_unreachable_or_missing_cluster_is_a_clear_error(tmp_path: Path):
    """Without a kubeconfig, or with an API server nobody answers, the run stops before anything is
    made and says what to do."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text((ROOT / "scenarios" / "ci-smoke.yaml").read_text().replace(
        "file://./runs", f"file://{tmp_path}/runs"))
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "PEERLAB_STATE_DIR": str(tmp_path / "state"),
           "TMPDIR": str(tmp_path / "tmp")}
    missing = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--backend",
                              "kubernetes", "--no-report"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=patient(120))
    assert missing.returncode == 1 and "no Kubernetes cluster configured" in missing.stderr, missing.stderr
    assert not list((tmp_path / "runs").glob("*"))  # nothing ran: no run directory
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    refused = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--backend",
                              "kubernetes", "--no-report"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=patient(300))
    assert refused.returncode == 1, refused.stderr
    assert "API server at https://127.0.0.1:1 does not answer" in refused.stderr, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert not list((tmp_path / "tmp" / "peerlab").glob("*"))  # nor a scratch directory
