"""The docker backend for real: containers of the node image on a per-run network, shaped by the
shaper entry point; the quickstart delivers as on the local backend; churn kills and restarts node
containers; containers are unprivileged; nothing is left behind."""
import asyncio
import gzip
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from orchestrator.backends.docker import remove_docker_objects
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from orchestrator.shaping import TRANSPORT
from orchestrator.shaping import ops as shaping_ops
from tests.support.cli import cache_with_jars, docker_objects, peerlab, run_netns
from tests.support.crash import CrashOne, assert_named
from tests.support.scenarios import SMALL, SMALL_UNCALIBRATED

pytestmark = [pytest.mark.emulation, pytest.mark.docker, pytest.mark.slow, pytest.mark.exclusive]


def rounded(value):
    """Every float to 10 significant digits, through dicts and lists."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def test_quickstart_on_docker_into_s3_delivers_as_on_local(tmp_path: Path, docker_engine, s3_endpoint):
    """The README's quickstart (its network, topics, rate and calibration; 12 nodes publishing for 6 s
    instead of 30 for 15: tests/emulation/test_quickstart.py runs it whole on the local backend) on
    the docker backend, stored in an s3:// store (a real S3 endpoint); the report computed again from
    the store equals the run's own."""
    before = run_netns()
    result = peerlab("run", "scenarios/quickstart.yaml", "--backend", "docker", "--set", "nodes.count=12",
                     "--set", "workload.duration=6s", "--set", "output.store=s3://peerlab/runs", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "docker" and manifest["status"] == "completed"
    m = json.loads((run_dir / "analysis" / "metrics.json").read_text())
    # the outcome tests/emulation/test_quickstart.py asserts for the local backend
    assert m["nodes"] == 12 and m["messages"] == 24  # 4/s for 6 s
    assert m["delivery_ratio"] == 1.0
    assert 50.0 <= m["latency_ms"]["min"] <= 55.0 and m["latency_ms"]["p50"] <= 80.0, m["latency_ms"]
    # admission's estimate for the docker backend against the peak of the run's containers
    assert abs(manifest["admission"]["estimate_error_pct"]) <= 25, manifest["admission"]
    assert len(manifest["calibration"]["throughput"]) == 2  # quickstart's throughput_nodes
    for r in manifest["calibration"]["throughput"]:  # the best round above, the slowest below (load only slows)
        assert r["measured_mbit"] >= 45.0 and min(r["rounds_mbit"]) <= 55.0, r
    assert docker_objects(docker_engine) == []
    assert run_netns() == before

    keys = {o["Key"] for page in s3_endpoint.get_paginator("list_objects_v2").paginate(Bucket="peerlab")
            for o in page.get("Contents", [])}
    prefix = f"runs/{run_dir.name}/"
    assert {f"{prefix}events/n{i}.jsonl.gz" for i in range(12)} <= keys
    assert {prefix + "manifest.json", prefix + "analysis/metrics.json", prefix + "analysis/report.html"} <= keys
    fresh = cache_with_jars(tmp_path / "fresh-cache")  # (fetching the jars is tests/analysis/test_s3a.py's)
    again = peerlab("report", f"s3://peerlab/runs/{run_dir.name}", timeout=600,
                    env={**os.environ, "PEERLAB_CACHE": str(fresh)})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "from Maven Central" not in again.stderr, again.stderr[-3000:]
    staged = fresh / "s3" / "peerlab" / "runs" / run_dir.name
    # the same figures, read in place through s3a: a mean may differ in its last bits (Spark sums in
    # another order)
    assert rounded(json.loads((staged / "analysis" / "metrics.json").read_text())) == rounded(m)


def test_docker_churn_kills_and_restarts_containers(tmp_path: Path, docker_engine):
    scenario = tmp_path / "small.yaml"
    # SMALL's round trips, not its rates (the quickstart's test above asserts docker's rate)
    scenario.write_text(SMALL.replace("throughput_nodes: 2", "throughput_nodes: 0")
                        + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    result = peerlab("run", str(scenario), "--backend", "docker", "--no-report", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [(f["action"], f["node"]) for f in manifest["faults_executed"]] == [("kill", "n7"), ("restart", "n7")]
    assert len(manifest["calibration"]["rtt"]) == 6  # the SMALL scenario's pairs
    for r in manifest["calibration"]["rtt"]:  # the quickest ping: the shaping's own (load only adds)
        assert abs(r["min_ms"] - 40.0) <= 0.1 * 40 + 1, r
    with gzip.open(run_dir / "events" / "n7.jsonl.gz", "rt") as f:
        events = [json.loads(line) for line in f]
    starts = [e for e in events if e["type"] == "start"]
    assert len(starts) == 2  # one log across both containers of n7 (the run's volume)
    after_restart = [e for e in events if e["type"] == "deliver_message" and e["ts"] > starts[1]["ts"]]
    assert after_restart, "n7 delivered nothing after its restart"
    assert docker_objects(docker_engine) == []


def test_a_node_container_that_dies_on_its_own_fails_the_run_named(tmp_path: Path, docker_engine):
    """Outside the fault timeline n3's container's process is SIGKILLed at T0 + 1 s: the docker backend's
    run records it, names it in the verdict and fails (the timeline's own kill of n7 is not counted)."""
    scenario = parse_scenario(SMALL_UNCALIBRATED + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    runner = CrashOne(scenario, make_plan(scenario), backend="docker")
    runner.run()
    assert_named(runner, allowed=False)
    assert docker_objects(docker_engine) == []


def test_containers_are_unprivileged_and_the_sandbox_keeps_shaping(tmp_path: Path, docker_engine):
    scenario = parse_scenario(f"name: tiny\nnodes: {{count: 2}}\noutput: {{store: 'file://{tmp_path}/runs'}}\n")
    runner = Runner(scenario, make_plan(scenario), backend="docker")
    backend = runner.backend
    try:
        backend.create_network()
        asyncio.run(runner._shape(TRANSPORT))
        config = runner._node_config("n0")
        backend.start_node("n0", config)
        node = docker_engine.containers.get(f"pl{runner.short}-n0").attrs
        sandbox = docker_engine.containers.get(f"pl{runner.short}-n0-net").attrs
        assert node["Config"]["User"] == "10001:10001"
        assert node["HostConfig"]["CapDrop"] == ["ALL"] and not node["HostConfig"]["CapAdd"]
        assert sandbox["HostConfig"]["CapAdd"] == ["NET_ADMIN"] and sandbox["HostConfig"]["CapDrop"] == ["ALL"]
        assert not node["HostConfig"]["Privileged"] and not sandbox["HostConfig"]["Privileged"]
        # its config holds the run's token: readable by the node's user (it started from it), no one else
        owners = {p.name: (p.stat().st_uid, p.stat().st_mode & 0o777)
                  for p in (runner.scratch, runner.scratch / "configs", runner.scratch / "configs" / "n0.json")}
        assert owners == {runner.short: (0, 0o700), "configs": (10001, 0o700), "n0.json": (10001, 0o600)}, owners
        assert backend.alive("n0")

        def tree() -> list[str]:
            return backend.namespaces.run(backend.sandbox("n0"), [shaping_ops.Describe("eth0")])[0]["lines"]

        shaped = tree()
        assert "class htb 1:1 parent root rate 50000000bit" in shaped
        backend.kill_node("n0")
        assert not backend.alive("n0")
        backend.start_node("n0", config)
        assert backend.alive("n0")
        assert tree() == shaped  # the namespace and its tc tree outlive the node's container
        far = backend.link_ends("n0")
        down = backend.namespaces.run(far.far_netns, [shaping_ops.Describe(far.far_ifname)])[0]["lines"]
        assert any("rate 50000000bit" in line for line in down)
    finally:
        backend.teardown()
        shutil.rmtree(runner.scratch, ignore_errors=True)  # (a run's end does this; here no run ran)
    assert docker_objects(docker_engine) == []


def test_clean_removes_what_a_crashed_docker_run_left_once_force_names_it(docker_engine):
    """Objects that name no orchestrator (an older peerlab's), and no lease here: nothing says the run is
    dead, so `clean` leaves them until `--force` names the run."""
    labels = {"peerlab.run": "c1ea4e"}
    docker_engine.networks.create("plc1ea4e", labels=labels)
    docker_engine.volumes.create("plc1ea4e-events", labels=labels)
    assert docker_objects(docker_engine) == ["plc1ea4e", "plc1ea4e-events"]
    result = peerlab("clean", timeout=120)
    assert result.returncode == 0 and "run c1ea4e: Docker objects but no lease here" in " ".join(result.stderr.split())
    assert docker_objects(docker_engine) == ["plc1ea4e", "plc1ea4e-events"]
    result = peerlab("clean", "--force", "c1ea4e", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "removed 0 containers, 1 networks, 1 volumes" in result.stderr
    assert docker_objects(docker_engine) == []


def test_image_runs_the_charts_pod_layout(docker_engine, tmp_path):
    """The node image as charts/peerlab runs it in a pod, from the chart's rendered StatefulSet
    (tests/support/pod_spec.py): the supervisor as uid 10001 on a read-only root with the chart's
    volumes, no capability (it cannot shape its own link), and the shaping daemon's image outside it
    entering the pod's network namespace to make the ifb that carries the download cap and to run the
    delay line's probe there. No Kubernetes here: the containers are the pod's and the daemon's."""
    from orchestrator.backends.docker import LABEL
    from orchestrator.backends.kubernetes import image_values
    from orchestrator.builds import node_image as image
    from tests.support.pod_spec import render, run_pod

    tag = image.build(docker_engine, say=lambda _: None)
    docs = render({"run": {"id": "podtest", "short": "90d0d0"}, "image": image_values(tag), "nodes": {"count": 1},
                   "control": {"token": "t" * 16}}, tmp_path)
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    try:
        pod = run_pod(docker_engine, sts, docs, tmp_path, {LABEL: "90d0d0"}, env={"PEERLAB_CONTROL_TOKEN": "t" * 16})
        assert sorted(pod) == ["node"]
        node = pod["node"]
        assert node.attrs["Config"]["User"] == "10001:10001" and node.attrs["HostConfig"]["ReadonlyRootfs"]
        assert not node.attrs["HostConfig"]["CapAdd"]
        daemon = docker_engine.containers.run(tag, entrypoint=["python3", "-m", "orchestrator.shaping", "--hold"],
                                              user="0", privileged=True, pid_mode="host", network_mode="none",
                                              labels={LABEL: "90d0d0"}, detach=True)
        node.reload()
        enter = ["nsenter", f"--net=/proc/{node.attrs['State']['Pid']}/ns/net"]
        status = None
        for _ in range(50):
            result = node.exec_run(["python3", "-m", "node.supervisor", "status", "--dir", "/run/peerlab"])
            if result.exit_code == 0:
                status = json.loads(result.output.decode().strip().splitlines()[-1])
                break
            time.sleep(0.2)
        assert status == {"running": False, "pid": None, "starts": 0, "exit_code": None}
        ops = json.dumps(shaping_ops.to_wire([shaping_ops.RedirectIngress("eth0", "ifb0"),
                                              shaping_ops.Download("ifb0", 50_000_000), shaping_ops.Describe("ifb0")]))
        out = daemon.exec_run([*enter, "python3", "-m", "orchestrator.shaping", "--ops", ops])
        assert out.exit_code == 0, out.output
        assert "class htb 1:1 parent root rate 50000000bit" in json.loads(out.output.decode())[-1]["lines"]
        refused = node.exec_run(["python3", "-m", "orchestrator.shaping", "--ops", ops])  # no NET_ADMIN there
        assert refused.exit_code != 0
        probe = daemon.exec_run([*enter, "python3", "-m", "orchestrator.shaping.delayline", "--probe"])
        assert probe.exit_code == 0 and b"NFQUEUE works" in probe.output, probe.output
    finally:
        remove_docker_objects("90d0d0", docker_engine)
    assert docker_objects(docker_engine) == []
