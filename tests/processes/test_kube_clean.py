"""`peerlab clean --kubernetes` and the lease a run holds on its release, against an API server that keeps
objects (tests/support/kube_api.py) and the real helm binary: releases whose orchestrator is gone (lease
lapsed, or none) are uninstalled, a live run's release is left alone unless --force, and a run's lease is
created before its release and renewed while it lives."""
from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.backends import kube_cluster, kube_lease
from tests.support.cli import ROOT, patient, peerlab
from tests.support.kube_api import KubeAPI, helm_release

pytestmark = pytest.mark.slow


def lease(name: str, age_s: float, holder: str = "laptop/4242") -> dict:
    renewed = (kube_lease.now_utc() - timedelta(seconds=age_s)).isoformat()
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {kube_lease.LABEL: name[2:]}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 60, "renewTime": renewed}}


@pytest.fixture
def api(tmp_path, monkeypatch):
    server = KubeAPI()
    server.kubeconfig = server.start(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig))
    yield server
    server.stop()


def ours(name: str) -> dict:
    """A release a run installed: peerlab's label on it."""
    return helm_release(name, "lab", labels={kube_lease.LABEL: name[2:]})


def test_clean_uninstalls_the_releases_whose_orchestrator_is_gone(api):
    for name in ("pl000001", "pl000002", "pl000003"):
        api.put("lab", "secrets", ours(name))
    api.put("lab", "secrets", helm_release("mydb", "lab"))  # not peerlab's
    api.put("lab", "secrets", helm_release("pl00beef", "lab"))  # named like peerlab's, without its label
    api.put("lab", "leases", lease("pl000001", age_s=600))   # its orchestrator died 10 min ago
    api.put("lab", "leases", lease("pl000002", age_s=5))     # a live run
    api.put("lab", "leases", lease("pl000004", age_s=300))   # died between its lease and its release

    result = peerlab("clean", "--kubernetes", "--namespace", "lab")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stderr.split())
    assert re.search(r"release pl000001 in namespace lab: lease held by laptop/4242, renewed 6\d\d s ago", out)
    assert "release pl000003 in namespace lab: no lease" in out
    assert "lease pl000004 in namespace lab (no release): deleting" in out
    assert "release pl000002 in namespace lab: orchestrator alive" in out and "left alone" in out
    assert "pl00beef" not in out
    assert sorted(api.objects("lab", "secrets")) == ["sh.helm.release.v1.mydb.v1", "sh.helm.release.v1.pl000002.v1",
                                                     "sh.helm.release.v1.pl00beef.v1"]
    assert sorted(api.objects("lab", "leases")) == ["pl000002"]

    forced = peerlab("clean", "--kubernetes", "--namespace", "lab", "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted(api.objects("lab", "secrets")) == ["sh.helm.release.v1.mydb.v1", "sh.helm.release.v1.pl00beef.v1"]
    assert api.objects("lab", "leases") == {}
    again = peerlab("clean", "--kubernetes", "--namespace", "lab")
    assert "nothing to clean in namespace lab" in again.stderr


def test_a_fresh_lease_whose_holder_died_on_this_host_does_not_protect_its_release(api):
    """A SIGKILLed orchestrator on this machine: its lease was renewed seconds ago, but no process has
    its pid, so clean need not wait for the lease to lapse; a live holder's release is left alone."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = socket.gethostname()
    api.put("lab", "secrets", ours("pl000005"))
    api.put("lab", "secrets", ours("pl000006"))
    api.put("lab", "leases", lease("pl000005", age_s=3, holder=f"{here}/{dead.pid}"))
    api.put("lab", "leases", lease("pl000006", age_s=3, holder=f"{here}/{os.getpid()}"))

    result = peerlab("clean", "--kubernetes", "--namespace", "lab")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stderr.split())
    assert f"release pl000005 in namespace lab: lease held by {here}/{dead.pid}: no such process on this host" in out
    assert "release pl000006 in namespace lab: orchestrator alive" in out
    assert sorted(api.objects("lab", "secrets")) == ["sh.helm.release.v1.pl000006.v1"]
    assert sorted(api.objects("lab", "leases")) == ["pl000006"]

def test_a_runs_lease_is_made_before_its_release_and_renewed_until_dropped(api, tmp_path, monkeypatch):
    monkeypatch.setattr(kube_lease, "RENEW_S", 0.2)
    cluster = kube_cluster.KubeCluster("lab")
    seen_at_install = []

    def helm(*args, timeout=300):
        if args[0] == "install":  # the release is about to exist: its lease must already
            seen_at_install.append(dict(api.objects("lab", "leases")))
            assert f"{kube_lease.LABEL}={args[1][2:]}" in args  # installed with peerlab's label
            api.put("lab", "secrets", ours(args[1]))
            return kube_cluster.subprocess.CompletedProcess(args, 0, "", "")
        return real_helm(*args, timeout=patient(timeout))

    real_helm = cluster._helm
    monkeypatch.setattr(cluster, "_helm", helm)
    cluster.install("pl00abcd", {"run": {"short": "00abcd"}}, tmp_path / "values.yaml")
    (held,) = seen_at_install[0].values()
    assert held["metadata"]["labels"] == {"peerlab.run": "00abcd"}
    assert held["spec"]["holderIdentity"] == kube_lease.holder()
    first = kube_lease.owners(cluster.api_client, "lab", ["pl00abcd"])[0]
    for _ in range(100):  # renewed every 0.2 s: within 10 s on a busy host too
        (owner,) = cluster.owners()
        if owner.renewed > first.renewed:
            break
        time.sleep(0.1)
    assert owner.installed and owner.alive(kube_lease.now_utc()) and owner.renewed > first.renewed
    cluster.uninstall("pl00abcd")
    assert api.objects("lab", "leases") == {} and api.objects("lab", "secrets") == {}
    assert cluster.lease is None


def test_a_user_who_may_not_hold_leases_is_told_before_anything_is_installed(tmp_path, monkeypatch):
    server = KubeAPI(forbidden={"leases"})
    monkeypatch.setenv("KUBECONFIG", str(server.start(tmp_path)))
    try:
        cluster = kube_cluster.KubeCluster("lab")
        monkeypatch.setattr(cluster, "_helm", lambda *a, **k: pytest.fail(f"helm {a[0]} was run"))
        with pytest.raises(RuntimeError, match="may not create leases .coordination.k8s.io. in namespace lab: "
                                               "grant get, list, create, patch and delete"):
            cluster.install("pl00abcd", {"run": {"short": "00abcd"}}, tmp_path / "values.yaml")
        assert server.objects("lab", "secrets") == {}
    finally:
        server.stop()


def test_clean_removes_the_credentials_of_an_orchestrator_killed_with_sigkill(api, tmp_path):
    """The kubeconfig's TLS key and certificates go in a private directory named for the process that
    made it, removed at its exit; a SIGKILL leaves it, and `peerlab clean --kubernetes` removes the dead
    ones of this user, not a live process's, not another user's."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("PEERLAB_KUBE_CREDENTIALS_DIR", None)
    run = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom orchestrator.backends import kube_config\n"
                            "kube_config.client_config(None)\nprint(kube_config.credentials_dir(), flush=True)\n"
                            "time.sleep(600)"], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    made = Path(run.stdout.readline().strip())
    assert made.parent == tmp and made.name.startswith(f"peerlab-kube-{run.pid}-")
    live = subprocess.Popen(["sleep", "600"])
    theirs = tmp / "peerlab-kube-1-other"  # pid 1 lives; and a dead pid's directory of another user:
    alive = tmp / f"peerlab-kube-{live.pid}-abc"
    dead = subprocess.Popen(["true"])
    dead.wait()
    foreign = tmp / f"peerlab-kube-{dead.pid}-xyz"
    for d in (theirs, alive, foreign):
        d.mkdir()
    os.chown(foreign, 65534, 65534)
    try:
        before = peerlab("clean", "--kubernetes", "--namespace", "lab", env=env)
        assert made.exists() and "removed" not in before.stderr  # its process lives
        run.kill()
        run.wait()
        assert made.exists()  # a SIGKILL runs no clean-up
        done = peerlab("clean", "--kubernetes", "--namespace", "lab", env=env)
        assert done.returncode == 0, done.stderr
        assert f"removed {made}: the cluster credentials of an orchestrator that died" in " ".join(done.stderr.split())
        assert not made.exists() and theirs.exists() and alive.exists() and foreign.exists()
    finally:
        live.kill()
        live.wait()


REGISTER_AND_WAIT = """
import sys, time
from pathlib import Path
from orchestrator.record import host_state
host_state.STATE_DIR = Path(sys.argv[1])
host_state.record_run(host_state.RunState(short="abc124", run_id="r-dead", pid=0, run_dir=sys.argv[2], scratch=sys.argv[3]))
print("registered", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("run_dir_left", [True, False])
def test_a_dead_kubernetes_runs_fetched_logs_are_stored_and_its_scratch_removed(tmp_path, monkeypatch, run_dir_left):
    """What `clean --kubernetes` leaves of a run whose orchestrator died (SIGKILL) once its release is
    removed: the logs its scratch directory had fetched go into the run directory, which says it
    crashed; the scratch directory (the release's values, with the run's token) and the state file go.
    Without a run directory to store into, the logs, the scratch directory and the state file stay."""
    from orchestrator.cli.machine import forget_dead_runs
    from orchestrator.record import host_state

    state, run_dir, scratch = tmp_path / "state", tmp_path / "runs" / "r-dead", tmp_path / "scratch" / "abc124"
    (scratch / "events").mkdir(parents=True)
    (scratch / "events" / "n0.jsonl").write_text('{"ts": 1, "node": "n0", "type": "start"}\n')
    (scratch / "values.yaml").write_text("run: {token: secret}\n")
    if run_dir_left:
        run_dir.mkdir(parents=True)
    orchestrator = subprocess.Popen([sys.executable, "-c", REGISTER_AND_WAIT, str(state), str(run_dir), str(scratch)],
                                    cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert orchestrator.stdout.readline().strip() == "registered"
    orchestrator.kill()
    orchestrator.wait()
    monkeypatch.setattr(host_state, "STATE_DIR", state)
    forget_dead_runs({"abc124"})
    if run_dir_left:
        with gzip.open(run_dir / "events" / "n0.jsonl.gz", "rt") as f:
            assert json.loads(f.read())["type"] == "start"
        status = json.loads((run_dir / "status").read_text())
        assert status["status"] == "crashed" and "stored 1 event logs" in status["detail"]
        assert not scratch.exists() and not (state / "abc124.json").exists() and not (state / "abc124.lease").exists()
    else:
        assert (scratch / "events" / "n0.jsonl").exists() and (state / "abc124.json").exists()
