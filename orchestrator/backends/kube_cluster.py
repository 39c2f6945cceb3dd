"""The Kubernetes cluster as the kubernetes backend sees it: Helm releases of charts/peerlab, pods,
exec into their containers, their output, and HTTP to a pod's port through the API server's proxy.

Only this module speaks to Kubernetes (the kubernetes client, the helm binary from .tools/bin); the
backend on top of it (`orchestrator.backends.kubernetes`) knows nodes, not API objects. Tests replace
it with a cluster of local network namespaces (tests/support/fake_cluster.py) that has the same methods.

A process in a pod that the orchestrator talks to for the whole run (the delay line, a calibration
probe) runs through this module as a local process whose stdin and stdout are the pod process's:

    python -m orchestrator.backends.kube_cluster exec --namespace NS [--context C] POD CONTAINER -- ARGV...
"""
from __future__ import annotations

import argparse
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from orchestrator.paths import ROOT
from orchestrator.run.node_client import ControlClient

CHART = ROOT / "charts" / "peerlab"


def helm_binary() -> str:
    local = ROOT / ".tools" / "bin" / "helm"
    if local.exists():
        return str(local)
    found = shutil.which("helm")
    if not found:
        raise RuntimeError("helm is missing: run .ci/tools (make setup does) or install helm v3.8+")
    return found


class KubeCluster:
    """One namespace of the cluster of the current kubeconfig context (or `context`)."""

    def __init__(self, namespace: str, context: str | None = None):
        from kubernetes import client, config

        try:
            config.load_kube_config(context=context)
        except Exception as kube_err:  # noqa: BLE001 - maybe we run inside the cluster
            try:
                config.load_incluster_config()
            except Exception:  # noqa: BLE001
                raise RuntimeError(f"no Kubernetes cluster configured ({kube_err}); set KUBECONFIG or "
                                   "--kube-context, or create one: peerlab prepare kind") from None
        self.namespace = namespace
        self.context = context
        self.config = client.Configuration.get_default_copy()
        self.core = client.CoreV1Api()
        self._exec_lock = threading.Lock()  # kubernetes.stream patches the shared client while it runs

    # releases ----------------------------------------------------------------------------------
    def _helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        cmd = [helm_binary(), *args, "--namespace", self.namespace]
        if self.context:
            cmd += ["--kube-context", self.context]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def install(self, release: str, values: dict[str, Any], values_file: Path) -> None:
        values_file.write_text(yaml.safe_dump(values, sort_keys=False))
        result = self._helm("install", release, str(CHART), "--create-namespace", "-f", str(values_file))
        if result.returncode != 0:
            raise RuntimeError(f"helm install {release} failed: {result.stderr.strip() or result.stdout.strip()}")

    def uninstall(self, release: str, timeout: float = 120) -> None:
        result = self._helm("uninstall", release, "--wait", "--timeout", f"{int(timeout)}s", "--ignore-not-found",
                            timeout=timeout + 30)
        if result.returncode != 0:
            raise RuntimeError(f"helm uninstall {release} failed: {result.stderr.strip()}")

    # pods --------------------------------------------------------------------------------------
    def wait_pods(self, selector: str, names: list[str], timeout: float,
                  say: Callable[[str], None] = lambda _: None) -> dict[str, str]:
        """Watch until every named pod runs all its containers; their IPs. On timeout, a RuntimeError
        naming the pods still waiting and why (Pending: unschedulable, ErrImagePull, ...)."""
        from kubernetes import watch

        wanted, ready, why = set(names), {}, {}
        deadline = time.monotonic() + timeout
        next_report = time.monotonic() + 10
        while set(ready) != wanted and time.monotonic() < deadline:
            w = watch.Watch()
            for event in w.stream(self.core.list_namespaced_pod, self.namespace, label_selector=selector,
                                  timeout_seconds=max(1, int(min(10, deadline - time.monotonic())))):
                pod = event["object"]
                name = pod.metadata.name
                if name not in wanted:
                    continue
                statuses = pod.status.container_statuses or []
                if (pod.status.phase == "Running" and pod.status.pod_ip and statuses
                        and all(s.state.running for s in statuses)):
                    ready[name] = pod.status.pod_ip
                else:
                    ready.pop(name, None)
                    waiting = [s.state.waiting.reason for s in statuses if s.state and s.state.waiting]
                    conditions = [c.message for c in pod.status.conditions or [] if c.message]
                    why[name] = f"{pod.status.phase}: {', '.join(waiting + conditions) or 'starting'}"
                if set(ready) == wanted:
                    w.stop()
                    break
            if time.monotonic() > next_report:
                say(f"  {len(ready)}/{len(wanted)} pods running")
                next_report += 10
        if set(ready) != wanted:
            late = sorted(wanted - set(ready))
            raise RuntimeError(f"{len(late)} pods not running after {timeout:.0f}s, e.g. "
                               + "; ".join(f"{p} ({why.get(p, 'not created')})" for p in late[:3]))
        return ready

    def exec(self, pod: str, container: str, argv: list[str], stdin: str | None = None,
             timeout: float = 60) -> tuple[int, str]:
        """Run argv in a container of the pod; (exit code, stdout + stderr)."""
        from kubernetes.stream import stream

        with self._exec_lock:
            resp = stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace, container=container,
                          command=argv, stdin=stdin is not None, stdout=True, stderr=True, tty=False,
                          _preload_content=False)
        try:
            if stdin is not None:
                resp.write_stdin(stdin)
            resp.run_forever(timeout=timeout)  # buffers stdout and stderr until the command ends
            out = [resp.read_stdout() or "", resp.read_stderr() or ""]
            code = resp.returncode
        finally:
            resp.close()
        return (code if code is not None else 124), "".join(out)

    def python_in(self, pod: str, container: str) -> list[str]:
        """The command of a local process that is a Python in the pod's container (see `bridge`)."""
        context = ["--context", self.context] if self.context else []
        return [sys.executable, "-m", "orchestrator.backends.kube_cluster", "exec", "--namespace", self.namespace,
                *context, pod, container, "--", "python3"]

    def bridge(self, pod: str, container: str, argv: list[str]) -> int:
        """Run argv in the container with this process's stdin and stdout as its own, until it ends or
        this stdin does (closing the exec stream closes the process's stdin); its exit code."""
        from kubernetes.stream import stream

        with self._exec_lock:
            resp = stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace, container=container,
                          command=argv, stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False)

        def pump() -> None:
            for line in sys.stdin:
                resp.write_stdin(line)
            resp.close()

        threading.Thread(target=pump, daemon=True).start()
        while resp.is_open():
            resp.update(timeout=1)
            if resp.peek_stdout():
                sys.stdout.write(resp.read_stdout())
                sys.stdout.flush()
            if resp.peek_stderr():
                sys.stderr.write(resp.read_stderr())
                sys.stderr.flush()
        return resp.returncode or 0

    def logs(self, pod: str, container: str, tail: int | None = None) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, self.namespace, container=container, tail_lines=tail)
        except Exception as err:  # noqa: BLE001 - a pod already gone has no logs to show
            return f"(no output: {err.__class__.__name__})"

    def pod_uid(self, pod: str) -> str | None:
        try:
            return self.core.read_namespaced_pod(pod, self.namespace).metadata.uid
        except Exception:  # noqa: BLE001
            return None

    # the control API, through the API server --------------------------------------------------
    def control_client(self, pod: str, port: int, node_id: str, token: str) -> ControlClient:
        url = f"{self.config.host}/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy"
        headers = {}
        auth = (self.config.api_key or {}).get("authorization") or (self.config.api_key or {}).get("BearerToken")
        if auth:
            headers["Authorization"] = auth if " " in auth else f"Bearer {auth}"
        return ControlClient(node_id, token, url=url, headers=headers, ssl=self._ssl_context())

    def _ssl_context(self) -> Any:
        if not self.config.host.startswith("https"):
            return None
        if not self.config.verify_ssl:
            return False
        ctx = ssl.create_default_context(cafile=self.config.ssl_ca_cert or None)
        if self.config.cert_file and self.config.key_file:
            ctx.load_cert_chain(self.config.cert_file, self.config.key_file)
        return ctx


def adapter_image(implementation: str) -> str | None:
    """PEERLAB_IMAGE_<IMPLEMENTATION> (js-libp2p: PEERLAB_IMAGE_JS_LIBP2P), where an adapter's image is
    pushed under another name; else None: the content tag `peerlab image build --implementation` makes."""
    return os.environ.get("PEERLAB_IMAGE_" + implementation.upper().replace("-", "_")) or None


def settings() -> dict[str, str | None]:
    """Where kubernetes runs go: PEERLAB_K8S_NAMESPACE (default peerlab), PEERLAB_K8S_CONTEXT, and
    PEERLAB_IMAGE (default the content tag `peerlab image build` makes, loaded into the cluster)."""
    return {"namespace": os.environ.get("PEERLAB_K8S_NAMESPACE", "peerlab"),
            "context": os.environ.get("PEERLAB_K8S_CONTEXT") or None,
            "image": os.environ.get("PEERLAB_IMAGE") or None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.backends.kube_cluster",
                                     description="Run a command in a pod's container, with this process's "
                                                 "stdin and stdout as its own (the orchestrator's bridge)")
    parser.add_argument("what", choices=["exec"])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--context")
    parser.add_argument("pod")
    parser.add_argument("container")
    parser.add_argument("argv", nargs="+", help="after --: the command")
    args = parser.parse_args(argv)
    return KubeCluster(args.namespace, args.context).bridge(args.pod, args.container, args.argv)


if __name__ == "__main__":
    sys.exit(main())
