"""What a kubernetes run keeps on this host, without root: its registry in the user's own state
directory, and the kubeconfig's keys the client library writes for its TLS gone with the run, even
from a child killed before its clean-up."""


def test_the_run_registry_needs_no_root_where_the_backend_needs_none(monkeypatch, tmp_path):
    """A user (the kind workflow's runner, anyone with only a kubeconfig) registers runs in their own
    runtime directory, or PEERLAB_STATE_DIR; root always /run/peerlab, so that every `peerlab clean` on
    the machine sees every run that made namespaces or containers."""
    from orchestrator.record import host_state

    monkeypatch.delenv("PEERLAB_STATE_DIR", raising=False)
    monkeypatch.setattr(host_state.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "user"))
    assert host_state.default_state_dir() == tmp_path / "user" / "peerlab"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert host_state.default_state_dir() == tmp_path / "home" / ".local" / "state" / "peerlab"
    monkeypatch.setenv("PEERLAB_STATE_DIR", str(tmp_path / "s"))
    assert host_state.default_state_dir() == tmp_path / "s"
    monkeypatch.setattr(host_state.os, "geteuid", lambda: 0)
    assert host_state.default_state_dir() == host_state.Path("/run/peerlab")
    monkeypatch.delenv("PEERLAB_STATE_DIR")
    assert host_state.default_state_dir() == host_state.Path("/run/peerlab")


KEYED_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
  - name: c
    cluster: {{server: "https://127.0.0.1:1", certificate-authority-data: {ca}}}
users:
  - name: u
    user: {{client-certificate-data: {cert}, client-key-data: {key}}}
contexts:
  - name: ctx
    context: {{cluster: c, user: u}}
current-context: ctx
"""


ORCHESTRATOR = """
import subprocess, sys
from orchestrator.backends.kube_cluster import KubeCluster
KubeCluster("peerlab")
bridge = subprocess.Popen([sys.executable, "-c", "import sys, time\\n"
                           "from orchestrator.backends.kube_cluster import KubeCluster\\n"
                           "KubeCluster('peerlab'); print('loaded', flush=True); time.sleep(60)"],
                          stdout=subprocess.PIPE, text=True)
assert bridge.stdout.readline() == "loaded\\n"
bridge.kill()  # as a probe's bridge ends: its exit clean-up never runs
bridge.wait()
print("done")
"""


def test_a_runs_kubeconfig_keys_leave_with_it_even_from_a_killed_child(tmp_path):
    """The client library writes a kubeconfig's key to a file for its TLS and removes it at exit; a
    process started by the run and killed (a probe's exec bridge) used to leave its copy in /tmp. Now
    every process of the run writes into the orchestrator's directory, which leaves with it."""
    import base64
    import os
    import subprocess
    import sys

    from tests.support.cli import ROOT

    b64 = {k: base64.b64encode(f"-----BEGIN {v}-----\nAAAA\n-----END {v}-----\n".encode()).decode()
           for k, v in (("ca", "CERTIFICATE"), ("cert", "CERTIFICATE"), ("key", "RSA PRIVATE KEY"))}
    (tmp_path / "kubeconfig").write_text(KEYED_KUBECONFIG.format(**b64))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PEERLAB_KUBE_CREDENTIALS_DIR"}
    done = subprocess.run([sys.executable, "-c", ORCHESTRATOR], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**env, "KUBECONFIG": str(tmp_path / "kubeconfig"), "TMPDIR": str(tmp)})
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr[-2000:]
    assert list(tmp.rglob("*")) == []  # neither the child's key nor the orchestrator's, nor their directory
