"""The kubernetes backend on a stand-in cluster (tests/support/fake_cluster.py): the release's values pass the
chart's schema with the real helm; pods are local namespaces running the node image's real main
process (the node supervisor); shaping goes through the shaper entry point into each pod, with the
download cap on an ifb; nodes crash and restart inside their pod; clock offsets are measured; every
log is collected before the release goes. No Kubernetes server can run here: the API calls
themselves (orchestrator/backends/kube_cluster.py) run for real in the kind workflow (.github/workflows/kind.yml)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from analysis.job import analyse
from orchestrator.backends import kubernetes as k8s_backend
from orchestrator.backends.kube_cluster import CHART, helm_binary
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from orchestrator.tools import image
from tests.support.adapters import MIXED_SMALL, require_adapters
from tests.support.cli import ROOT, run_netns
from tests.support.fake_cluster import FakeCluster
from tests.support.kubeconfig import KUBECONFIG

pytestmark = [pytest.mark.emulation, pytest.mark.exclusive]


def supervisor(directory: Path, cmd: str, *args: str, stdin: str | None = None) -> dict:
    out = subprocess.run([sys.executable, "-m", "node.supervisor", cmd, "--dir", str(directory), *args],
                         input=stdin, capture_output=True, text=True, timeout=60, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_supervisor_starts_kills_and_restarts_a_node(tmp_path: Path):
    """The pod's main process: the node is down until started, dies by SIGKILL, comes back with the
    same config; a second start while it runs is refused; SIGTERM takes the node down with it."""
    config = json.dumps({"run_id": "test", "node_id": "n0", "protocol": "floodsub",
                         "listen": {"host": "127.0.0.1", "port": 0}, "event_log": str(tmp_path / "n0.jsonl"),
                         "control": {"token": "t" * 16, "unix": str(tmp_path / "n0.sock")}})
    serve = subprocess.Popen([sys.executable, "-m", "node.supervisor", "serve", "--dir", str(tmp_path / "sup")],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert "waiting for requests" in serve.stdout.readline()
        assert supervisor(tmp_path / "sup", "status") == {"running": False, "pid": None, "starts": 0,
                                                           "exit_code": None}
        first = supervisor(tmp_path / "sup", "start", stdin=config + "\n")
        assert first["running"] and first["starts"] == 1
        assert "error" in supervisor(tmp_path / "sup", "start", stdin=config + "\n")
        assert supervisor(tmp_path / "sup", "wait", "--timeout", "0.5")["running"]  # still up
        killed = supervisor(tmp_path / "sup", "kill")
        assert killed["running"] is False and killed["exit_code"] == -9
        again = supervisor(tmp_path / "sup", "start", stdin=config + "\n")
        assert again["running"] and again["starts"] == 2 and again["pid"] != first["pid"]
        pid = again["pid"]
    finally:
        serve.terminate()
        serve.wait(15)
    assert serve.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_supervisor_runs_the_groups_command_and_stops_it_with_sigterm(tmp_path: Path):
    """An adapter's pod: the supervisor runs PEERLAB_NODE_COMMAND with the config's path in it, and
    `stop` is a SIGTERM; a command that is not a JSON list is refused by name."""
    script = "import sys, time; open(sys.argv[1] + '.seen', 'w').write(open(sys.argv[1]).read()); time.sleep(60)"
    env = {**os.environ, "PEERLAB_NODE_COMMAND": json.dumps([sys.executable, "-c", script, "{config}"])}
    serve = subprocess.Popen([sys.executable, "-m", "node.supervisor", "serve", "--dir", str(tmp_path)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert "waiting for requests" in serve.stdout.readline()
        assert supervisor(tmp_path, "start", stdin='{"node_id": "n4"}\n')["running"]
        deadline = time.monotonic() + 10
        while not (tmp_path / "config.json.seen").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads((tmp_path / "config.json.seen").read_text()) == {"node_id": "n4"}
        assert supervisor(tmp_path, "stop")["running"] in (True, False)  # answered at once
        stopped = supervisor(tmp_path, "wait", "--timeout", "10")
        assert stopped["running"] is False and stopped["exit_code"] == -15
    finally:
        serve.terminate()
        serve.wait(15)
    env["PEERLAB_NODE_COMMAND"] = "node adapter.mjs"
    serve = subprocess.Popen([sys.executable, "-m", "node.supervisor", "serve", "--dir", str(tmp_path)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert "waiting for requests" in serve.stdout.readline()
        refused = supervisor(tmp_path, "start", stdin='{"node_id": "n4"}\n')
        assert "PEERLAB_NODE_COMMAND must be a JSON list" in refused["error"]
    finally:
        serve.terminate()
        serve.wait(15)


@pytest.mark.spark
def test_ci_smoke_on_the_kubernetes_backend(tmp_path: Path, monkeypatch, spark):
    monkeypatch.setattr(k8s_backend, "connect", FakeCluster)
    monkeypatch.setenv("PEERLAB_IMAGE", "peerlab-node:ci")
    before = run_netns()
    scenario = parse_scenario((ROOT / "scenarios" / "ci-smoke.yaml").read_text())
    scenario = scenario.model_copy(update={"output": scenario.output.model_copy(
        update={"store": f"file://{tmp_path}/runs"})})
    run_dir = Runner(scenario, backend="kubernetes").run()
    cluster = FakeCluster.instances[-1]

    # the values the backend wrote are the chart's (real helm), and render valid Kubernetes 1.35 objects
    (values,) = cluster.installs
    assert values["nodes"]["count"] == 8 and values["image"] == {"repository": "peerlab-node", "tag": "ci",
                                                                 "pullPolicy": "IfNotPresent"}
    assert json.loads(values["plan"])["protocol"] == "floodsub"
    for doc in cluster.rendered:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
    assert "ifb" in manifest["shaping"]["bandwidth"] and "cluster node" in manifest["shaping"]["probe"]
    clock = manifest["clock"]
    assert clock["method"].startswith("NTP-style") and set(clock["offsets_ns"]) == {f"n{i}" for i in range(8)}
    # one machine, one clock: what is measured is the method's own error, bounded by rtt/2
    assert all(abs(off) <= clock["rtt_ns"][n] // 2 + 1 for n, off in clock["offsets_ns"].items())
    assert [(f["action"], f.get("node")) for f in manifest["faults_executed"]] == [
        ("kill", "n7"), ("restart", "n7"), ("partition", None), ("heal", None)]
    assert len(manifest["calibration"]["rtt"]) == 4 and len(manifest["calibration"]["throughput"]) == 2
    for r in manifest["calibration"]["throughput"]:  # download capped on the ifb, upload on eth0
        assert abs(r["measured_mbit"] - 50.0) <= 5.0, r
    for r in manifest["calibration"]["rtt"]:
        assert abs(r["measured_ms"] - 40.0) <= 4.0, r

    metrics = analyse(run_dir, spark)
    print("ci-smoke on the kubernetes backend:", json.dumps({k: metrics[k] for k in
                                                            ("messages", "delivery_ratio", "latency_ms")}))
    assert metrics["messages"] == 64
    # the only losses: what n7 missed while it was down (floodsub does not repair)
    assert metrics["delivery_ratio"] >= 0.9
    assert 20.0 <= metrics["latency_ms"]["p50"] <= 35.0
    assert len(list((run_dir / "events").glob("n*.jsonl.gz"))) == 8
    restarted = (run_dir / "events" / "n7.jsonl.gz")
    assert restarted.stat().st_size > 0
    # nothing left: supervisors and nodes gone, namespaces removed
    assert run_netns() == before
    assert not cluster.pods




def test_js_and_py_libp2p_nodes_run_in_pods_of_their_own_images(tmp_path: Path, monkeypatch):
    """Each adapter's nodes are a StatefulSet of its image whose supervisor runs the adapter's command;
    their links are delayed by a delay line in every pod (this kernel has no netem) and probed from the
    pods' shaper sidecars; a py node is killed and restarted in its pod; every message reaches every
    node that was up, across implementations; nothing is left afterwards."""
    require_adapters()
    monkeypatch.setattr(k8s_backend, "connect", FakeCluster)
    monkeypatch.setenv("PEERLAB_IMAGE", "peerlab-node:ci")
    before = run_netns()
    run_dir = Runner(parse_scenario(MIXED_SMALL + f"output: {{store: 'file://{tmp_path}/runs'}}\n"),
                     backend="kubernetes").run()
    cluster = FakeCluster.instances[-1]

    (values,) = cluster.installs
    assert values["nodes"]["count"] == 0 and values["attackers"]["count"] == 0
    groups = {a["implementation"]: a for a in values["adapters"]}
    assert sorted(groups) == ["js-libp2p", "py-libp2p"] and {a["count"] for a in groups.values()} == {3}
    assert groups["js-libp2p"]["image"]["repository"] == "peerlab-js-libp2p"
    assert groups["py-libp2p"]["command"][-2:] == ["--config", "{config}"]
    sets = {d["metadata"]["name"]: d for d in cluster.rendered if d["kind"] == "StatefulSet"}
    assert sorted(sets) == [f"pl{values['run']['short']}-js-libp2p", f"pl{values['run']['short']}-py-libp2p"]
    for sts in sets.values():
        kubernetes_validate.validate(sts, "1.35.0", strict=True)
        node, shaper = sts["spec"]["template"]["spec"]["containers"]
        assert node["image"].startswith("peerlab-") and shaper["image"] == "peerlab-node:ci"
        assert any(e["name"] == "PEERLAB_NODE_COMMAND" for e in node["env"])

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
    assert manifest["shaping"]["mode"] == "delayline"
    line = manifest["shaping"]["delay_line"]  # one per pod, their counts added up
    assert sorted(line["packets"]) == [f"n{i}" for i in range(6)] and min(line["packets"].values()) > 100
    assert line["errors"] == []
    cal = manifest["calibration"]  # probes from the pods' shaper sidecars, through the delay lines
    assert cal["rtt"] and all(40 <= r["measured_ms"] < 80 for r in cal["rtt"]), cal["rtt"]
    assert [(f["action"], f.get("node")) for f in manifest["faults_executed"]] == [("kill", "n4"), ("restart", "n4")]

    events = {}
    for i in range(6):
        with gzip.open(run_dir / "events" / f"n{i}.jsonl.gz", "rt") as f:
            events[f"n{i}"] = [json.loads(line) for line in f]
    assert [e["type"] for e in events["n4"]].count("start") == 2  # restarted in its pod
    published = {e["msg_id"]: e for evs in events.values() for e in evs if e["type"] == "publish_message"}
    assert len(published) >= 20
    ready = {n: max(e["ts"] for e in evs if e["type"] == "ready") for n, evs in events.items()}
    expected = {m for m, e in published.items() if e["ts"] > ready[e["node"]] + 1e9}
    for node, evs in events.items():
        got = {e["msg_id"] for e in evs if e["type"] in ("deliver_message", "publish_message")}
        if node != "n4":
            assert expected <= got, f"{node} missed {sorted(expected - got)}"
    delivered = [e for evs in events.values() for e in evs if e["type"] == "deliver_message"]
    assert min(e["ts"] - published[e["msg_id"]]["ts"] for e in delivered) >= 20e6  # delayed, both ways:
    kinds = {(e["node"] < "n3", e["peer"] < "n3") for e in delivered}          # js<->py first copies
    assert {(True, False), (False, True)} <= kinds
    assert run_netns() == before and not cluster.pods
    leftover = subprocess.run(["pgrep", "-f", "orchestrator.shaping.delayline"], capture_output=True, text=True)
    assert leftover.stdout == ""


def test_values_name_the_image_and_counts_by_role(monkeypatch, tmp_path: Path):
    """Attackers get their own StatefulSet; ordinal i of each is the i-th node of that role."""
    monkeypatch.setattr(k8s_backend, "connect", FakeCluster)
    text = (ROOT / "scenarios" / "topiary-eclipse.yaml").read_text()
    scenario = parse_scenario(text, overrides=[f"output.store=file://{tmp_path}/runs"])
    runner = Runner(scenario, backend="kubernetes")
    try:
        backend = runner.backend
        values = backend.values()
        honest = [n.id for n in scenario_plan(runner) if n.role == "honest"]
        attackers = [n.id for n in scenario_plan(runner) if n.role != "honest"]
        assert values["nodes"]["count"] == len(honest) and values["attackers"]["count"] == len(attackers) > 0
        assert backend.pods[honest[3]].endswith("-nodes-3") and backend.pods[attackers[0]].endswith("-attackers-0")
        assert values["image"]["tag"] == image.image_tag().rpartition(":")[2]
        # the chart takes these values (its schema, real helm) and makes exactly these pods
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        render = subprocess.run([helm_binary(), "template", "r", str(CHART), "-f", str(tmp_path / "values.yaml")],
                                capture_output=True, text=True, timeout=120)
        assert render.returncode == 0, render.stderr
        sets = {d["metadata"]["name"]: d["spec"]["replicas"] for d in yaml.safe_load_all(render.stdout)
                if d and d["kind"] == "StatefulSet"}
        pods = {f"{name}-{i}" for name, replicas in sets.items() for i in range(replicas)}
        assert pods == set(backend.pods.values())
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
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "missing"), "PEERLAB_STATE_DIR": str(tmp_path / "state")}
    missing = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--backend",
                              "kubernetes", "--no-report"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=120)
    assert missing.returncode == 1 and "no Kubernetes cluster configured" in missing.stderr, missing.stderr
    assert not list((tmp_path / "runs").glob("*"))  # nothing ran: no run directory
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    refused = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--backend",
                              "kubernetes", "--no-report"], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=300)
    assert refused.returncode == 1, refused.stderr
    assert "API server at https://127.0.0.1:1 does not answer" in refused.stderr, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
