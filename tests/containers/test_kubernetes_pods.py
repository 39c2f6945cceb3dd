"""The kubernetes backend on the chart's own pods (tests/support/docker_pods.py): the release rendered
by the real helm, each pod's containers run by Docker from the rendered spec with the chart's images,
non-root node container without capabilities, shaped from outside by the shaping daemon's stand-in (a
privileged container of peerlab's image); the orchestrator itself runs as an unprivileged
user, as it would beside a real cluster. No Kubernetes server can run here: the API calls themselves
(orchestrator/backends/kube_cluster.py) run for real in the kind workflow (.github/workflows/kind.yml)."""
from __future__ import annotations

import gzip
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kubernetes_validate
import pytest

from analysis.job import analyse
from orchestrator.backends import kubernetes as k8s_backend
from orchestrator.builds import node_image as image
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from tests.support.adapters import ADAPTERS, MIXED_SMALL, require_adapters
from tests.support.cli import ROOT, docker_objects, run_netns
from tests.support.docker_pods import DockerPods

pytestmark = [pytest.mark.emulation, pytest.mark.docker, pytest.mark.slow, pytest.mark.exclusive]

NOBODY = pwd.getpwnam("nobody")


def as_nobody(docker_socket: str = "/var/run/docker.sock") -> list[str]:
    """setpriv to uid/gid nobody with only the Docker socket's group: an unprivileged user of the
    engine, as a cluster's user is of the API server."""
    return ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
            f"--groups={os.stat(docker_socket).st_gid}", "--inh-caps=-all"]


def require_nobody_can_run_the_checkout() -> None:
    """The checkout and its venv must be readable by other users (they are in /work here); a clone
    under a private home directory cannot be run as nobody, and the test says so rather than pass."""
    probe = subprocess.run([*as_nobody(), sys.executable, "-c", "import orchestrator.cli"], cwd=ROOT,
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user nobody cannot run this checkout's Python ({probe.stderr.strip()[-200:]}): "
                    "clone it where other users can read it to run this test")


@pytest.mark.spark
def test_ci_smoke_on_the_charts_pods_run_by_an_unprivileged_user(request, docker_engine, spark):
    """ci-smoke through the real CLI as user nobody (no root, no capabilities, state directory in its
    own home): the pods are the chart's, with peerlab's real image; shaping, calibration, clock
    offsets, the kill/restart and the partition all act inside them; every log is collected and
    nothing is left (containers, network, the state directory's lease)."""
    require_nobody_can_run_the_checkout()
    tag = image.build(docker_engine, say=lambda _m: None)
    home = Path(tempfile.mkdtemp(prefix="peerlab-nobody-"))  # pytest's tmp_path is root's alone
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    scenario = home / "ci-smoke.yaml"
    scenario.write_text((ROOT / "scenarios" / "ci-smoke.yaml").read_text().replace(
        "file://./runs", f"file://{home}/runs"))
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    os.chown(scenario, NOBODY.pw_uid, NOBODY.pw_gid)
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "PEERLAB_STATE_DIR")}
    env.update(HOME=str(home), PEERLAB_IMAGE=tag, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([*as_nobody(), sys.executable, "-m", "tests.support.docker_pods", "run", str(scenario),
                           "--backend", "kubernetes", "--no-report"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (home / "runs").iterdir()
    assert run_dir.stat().st_uid == NOBODY.pw_uid

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
    assert "ifb" in manifest["shaping"]["bandwidth"] and "cluster node" in manifest["shaping"]["probe"]
    clock = manifest["clock"]
    assert clock["method"].startswith("NTP-style") and set(clock["offsets_ns"]) == {f"n{i}" for i in range(8)}
    assert [(f["action"], f.get("node")) for f in manifest["faults_executed"]] == [
        ("kill", "n7"), ("restart", "n7"), ("partition", None), ("heal", None)]
    cal = manifest["calibration"]
    assert len(cal["rtt"]) == 4 and len(cal["throughput"]) == 2
    for r in cal["throughput"]:  # download capped on the pod's ifb, upload on its eth0
        assert r["measured_mbit"] >= 45.0 and min(r["rounds_mbit"]) <= 55.0, r  # (load only slows a round)
    for r in cal["rtt"]:  # the quickest ping: the shaping's own (load only adds); the bound of the
        # cluster's test (10% + 1 ms): beside `make test`'s other tests one pair's quickest was 44.6 ms
        assert abs(r["min_ms"] - 40.0) <= 0.1 * 40.0 + 1, r

    metrics = analyse(run_dir, spark)
    print("ci-smoke on the chart's pods:", json.dumps({k: metrics[k] for k in
                                                      ("messages", "delivery_ratio", "latency_ms")}),
          [r["measured_mbit"] for r in cal["throughput"]], [r["measured_ms"] for r in cal["rtt"]])
    print(done.stderr[-1500:])
    assert metrics["messages"] == 64
    assert metrics["delivery_ratio"] >= 0.9  # the only losses: what n7 missed while down
    assert 20.0 <= metrics["latency_ms"]["p50"] <= 35.0
    assert len(list((run_dir / "events").glob("n*.jsonl.gz"))) == 8
    assert (run_dir / "events" / "n7.jsonl.gz").stat().st_size > 0
    # the state directory is the user's own, and the run's lease in it is gone
    state = home / ".local" / "state" / "peerlab"
    assert state.is_dir() and state.stat().st_uid == NOBODY.pw_uid
    assert [p for p in state.rglob("*") if p.is_file()] == []
    assert docker_objects(docker_engine) == []


def test_every_adapters_nodes_run_in_pods_of_their_own_images(tmp_path: Path, monkeypatch, docker_engine):
    """Each adapter's nodes are a StatefulSet of its image whose supervisor runs the adapter's command;
    their links are delayed by the one delay line of the shaping daemon (this kernel has no netem),
    attached to every pod's namespace, and probed from the daemon inside each pod's namespace; a py node is killed and restarted in its pod; every message reaches every node that
    was up, across implementations; nothing is left afterwards."""
    require_adapters()
    tag = image.build(docker_engine, say=lambda _m: None)
    for name in ADAPTERS:
        image.build(docker_engine, implementation=name, say=lambda _m: None)
    monkeypatch.setattr(k8s_backend, "connect", DockerPods)
    monkeypatch.setenv("PEERLAB_IMAGE", tag)
    before = run_netns()
    scenario = parse_scenario(MIXED_SMALL + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    run_dir = Runner(scenario, make_plan(scenario), backend="kubernetes").run()
    cluster = DockerPods.instances[-1]

    (values,) = cluster.installs
    assert values["nodes"]["count"] == 0 and values["attackers"]["count"] == 0
    groups = {a["implementation"]: a for a in values["adapters"]}
    assert sorted(groups) == ADAPTERS and {a["count"] for a in groups.values()} == {2}
    assert groups["py-libp2p"]["command"][-2:] == ["--config", "{config}"]
    sets = {d["metadata"]["name"]: d for d in cluster.rendered if d["kind"] == "StatefulSet"}
    assert sorted(sets) == [f"pl{values['run']['short']}-{name}" for name in ADAPTERS]
    for sts in sets.values():
        kubernetes_validate.validate(sts, "1.35.0", strict=True)
        (node,) = sts["spec"]["template"]["spec"]["containers"]
        assert node["image"].startswith("peerlab-")
        assert any(e["name"] == "PEERLAB_NODE_COMMAND" for e in node["env"])

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["backend"] == "kubernetes"
    assert manifest["shaping"]["mode"] == "delayline"
    line = manifest["shaping"]["delay_line"]  # the daemon's one, for every pod
    assert sorted(line["packets"]) == [f"n{i}" for i in range(8)] and min(line["packets"].values()) > 100
    assert line["errors"] == []
    cal = manifest["calibration"]  # probes from the daemon in the pods' namespaces, through the delay line
    assert cal["rtt"] and all(40 <= r["min_ms"] < 50 for r in cal["rtt"]), cal["rtt"]
    assert [(f["action"], f.get("node")) for f in manifest["faults_executed"]] == [("kill", "n4"), ("restart", "n4")]

    events = {}
    for i in range(8):
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
    implementation = {n["id"]: n["implementation"] for n in manifest["plan"]["nodes"]}
    crossings = {(implementation[e["peer"]], implementation[e["node"]]) for e in delivered}
    for name in ADAPTERS:  # each implementation's nodes took first copies from another's, and gave them
        assert any(b == name != a for a, b in crossings) and any(a == name != b for a, b in crossings), (name, crossings)
    assert run_netns() == before and docker_objects(docker_engine) == []
