"""The Kubernetes cluster as the kubernetes backend sees it: Helm releases of charts/peerlab, pods,
their output, HTTP to a pod's port through the API server's proxy (the node supervisor's API and the
node's control API: nothing execs into a node's pod), and the shaping daemon on each cluster node (charts/peerlab-shaper, namespace $PEERLAB_SHAPER_NAMESPACE or
peerlab-system): its agent kept open on one exec stream per node, a pod's network namespace as that
daemon sees it (found through the CRI), a Python there.

Only this module and its kube_exec speak to Kubernetes (the kubernetes client, helm through
orchestrator/helm.py); the backend on top of it (`orchestrator.backends.kubernetes`) knows nodes, not API
objects. Its tests run against the local 3-node cluster (tests/cluster/).

Exec itself (a command to its end, a command kept open and spoken to in lines, a local process
bridged to one in a pod) is orchestrator/backends/kube_exec.py; the client's settings (the kubeconfig
and its TLS files) are kube_config.py's.

May import: kube_config, kube_exec, kube_lease, backends.base, control.node_client, store.durable,
orchestrator.helm, node.paths, shaping.agent (lazily). kube_exec and kube_config import nothing of it.
"""
from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from node.paths import ROOT
from orchestrator.backends import kube_exec, kube_lease
from orchestrator.backends.base import side_by_side
from orchestrator.backends.kube_config import client_config
from orchestrator.backends.kube_exec import ExecResult
from orchestrator.control.node_client import ControlClient
from orchestrator.helm import helm
from orchestrator.store.durable import write_private

CHART = ROOT / "charts" / "peerlab"
SHAPER_LABEL = "app.kubernetes.io/name=peerlab-shaper"
SHAPER_CONTAINER = "shaper"
SHAPER_HELP = ("install the shaping daemon (charts/peerlab-shaper: `peerlab cluster up` does on the local "
               "cluster; docs/backends.md#the-shaping-daemon says how on yours)")
REST_TIMEOUT = 30     # seconds for one API call (connect and read)
STILL_TERMINATING = "still exists"  # helm 4: an uninstall whose deleted objects have not gone yet
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
WATCH_S = 3  # the longest a pod watch waits for an event (and a stop waits for the watch)


def write_values(values: dict[str, Any], path: Path) -> None:
    """The release's values file, as JSON (which is YAML): every string quoted. PyYAML leaves a run's
    short id such as 606e96 bare, which helm's YAML 1.2 reads as a number. It holds the run's control
    token: 0o600 from its creation."""
    write_private(path, json.dumps(values, indent=1))


class KubeCluster:
    """One namespace of the cluster of the current kubeconfig context (or `context`)."""

    def __init__(self, namespace: str, context: str | None = None):
        from kubernetes import client

        self.namespace = namespace
        self.context = context
        self.shaper_namespace = os.environ.get("PEERLAB_SHAPER_NAMESPACE") or "peerlab-system"
        self._shaper_pods: dict[str, str] = {}
        self.config = client_config(context)
        self.api_client = client.ApiClient(self.config)
        self.core = client.CoreV1Api(self.api_client)
        self.lease: kube_lease.RunLease | None = None

    # releases ----------------------------------------------------------------------------------
    def _helm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return helm(*args, namespace=self.namespace, context=self.context, timeout=timeout)

    def ensure_namespace(self) -> None:
        """The run's namespace, created labelled for Pod Security `restricted` (the pods hold no
        capability and set no sysctl: the shaping daemon shapes them and sets their TCP from outside).
        Without the right to read namespaces, left to helm."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            self.core.read_namespace(self.namespace, _request_timeout=REST_TIMEOUT)
        except HTTPError as err:
            raise RuntimeError(f"the Kubernetes API server at {self.config.host} does not answer "
                               f"({err.__class__.__name__}); is the cluster up? (kubectl cluster-info)") from None
        except ApiException as err:
            if err.status == 404:
                labels = {PSA_ENFORCE: "restricted", "pod-security.kubernetes.io/warn": "restricted"}
                self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
                    name=self.namespace, labels=labels)), _request_timeout=REST_TIMEOUT)
                return
            if err.status == 403:
                return
            raise

    def install(self, release: str, values: dict[str, Any], values_file: Path) -> None:
        """The run's release, with the lease that says its orchestrator lives made first (kube_lease)."""
        write_values(values, values_file)
        self.ensure_namespace()
        self.lease = kube_lease.RunLease(self.api_client, self.namespace, release)
        self.lease.hold()
        # the release carries peerlab's label: clean finds releases by it, never by their name alone
        # the namespace is ensure_namespace's (helm's --create-namespace would need the right to patch it)
        result = self._helm("install", release, str(CHART), "-f", str(values_file),
                            "--labels", f"{kube_lease.LABEL}={release[2:]}")
        if result.returncode != 0:
            try:  # a failed install can leave a release in status failed
                self.uninstall(release)
            except RuntimeError:
                pass
            raise RuntimeError(f"helm install {release} failed: {result.stderr.strip() or result.stdout.strip()}")

    def uninstall(self, release: str, timeout: float = 120) -> None:
        """The release gone (waiting for its pods), then its lease."""
        # foreground: the StatefulSets go only once their pods have, so --wait returns with no pod left
        result = self._helm("uninstall", release, "--wait", "--cascade", "foreground", "--timeout", f"{int(timeout)}s",
                            "--ignore-not-found",
                            timeout=timeout + 30)
        if result.returncode != 0 and STILL_TERMINATING not in result.stderr:
            raise RuntimeError(f"helm uninstall {release} failed: {result.stderr.strip()}")
        # helm may end (helm 4: even with success) while a StatefulSet it deleted is still Terminating
        if not self._gone(release, timeout):
            raise RuntimeError(f"helm uninstall {release}: its StatefulSets or pods are still there after {timeout:.0f} s")
        if self.lease and self.lease.release == release:
            self.lease.drop()
            self.lease = None
        else:
            kube_lease.delete_lease(self.api_client, self.namespace, release)

    def owners(self) -> list[kube_lease.Owner]:
        """peerlab's releases in the namespace (any status: those with peerlab's label, which its installs
        set, and a name like its own) and leases, with who holds each."""
        result = self._helm("list", "--deployed", "--failed", "--pending", "--uninstalling", "--filter",
                            kube_lease.RELEASE.pattern, "--selector", kube_lease.LABEL, "-o", "json", timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"helm list failed: {result.stderr.strip()}")
        releases = [r["name"] for r in json.loads(result.stdout or "[]")]
        return kube_lease.owners(self.api_client, self.namespace, releases)

    def _gone(self, release: str, timeout: float) -> bool:
        """Whether the release's StatefulSets and pods are all gone within `timeout` (helm 4 can end an
        uninstall with an error while a StatefulSet it deleted is still Terminating)."""
        from kubernetes import client

        apps = client.AppsV1Api(self.api_client)
        selector = f"{kube_lease.LABEL}={release[2:]}"  # the chart's label on every object of the run
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sets = apps.list_namespaced_stateful_set(self.namespace, label_selector=selector, _request_timeout=REST_TIMEOUT)
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector, _request_timeout=REST_TIMEOUT)
            if not sets.items and not pods.items:
                return True
            time.sleep(1)
        return False

    # pods --------------------------------------------------------------------------------------
    def wait_pods(self, selector: str, names: list[str], timeout: float,
                  say: Callable[[str], None] = lambda _: None,
                  check_stop: Callable[[], None] = lambda: None) -> dict[str, str]:
        """Watch until every named pod runs all its containers; their IPs. On timeout, a RuntimeError
        naming the pods still waiting and why (Pending: unschedulable, ErrImagePull, ...).
        `check_stop` is called at each event and at least every WATCH_S (it raises to stop the wait:
        a run being stopped by a signal)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        wanted, ready, why = set(names), {}, {}
        deadline = time.monotonic() + timeout
        next_report = time.monotonic() + 10
        while set(ready) != wanted and time.monotonic() < deadline:
            check_stop()
            w = watch.Watch()
            seconds = max(1, int(min(WATCH_S, deadline - time.monotonic())))
            events = w.stream(self.core.list_namespaced_pod, self.namespace, label_selector=selector,
                              timeout_seconds=seconds, _request_timeout=seconds + REST_TIMEOUT)
            try:
                for event in events:
                    try:
                        check_stop()
                    except BaseException:
                        w.stop()
                        raise
                    if event["type"] == "ERROR":  # e.g. 410 Gone: the watch expired; list and watch again
                        w.stop()
                        break
                    pod = event["object"]
                    if pod.metadata.name in wanted and pod.status.phase == "Failed":  # never runs: say why now
                        w.stop()
                        raise RuntimeError(f"pod {pod.metadata.name} failed: {pod.status.reason or 'Failed'}: "
                                           f"{pod.status.message or ''}".rstrip(": "))
                    if self._pod_event(pod, wanted, ready, why):
                        w.stop()
                        break
            except ApiException as err:  # the same, raised instead of sent as an event
                if err.status not in (410, 500, 503, 504):
                    raise
            if time.monotonic() > next_report:
                say(f"  {len(ready)}/{len(wanted)} pods running")
                next_report += 10
        if set(ready) != wanted:
            late = sorted(wanted - set(ready))
            hint = ""
            if any("ImagePull" in why.get(p, "") for p in late):
                hint = (": the cluster cannot get the pods' image. Build this checkout's images (`peerlab image "
                        "build --implementation all`) and import them into the local cluster (`peerlab cluster "
                        "load TAG...`, or `cluster up` again), or push them where your cluster pulls from "
                        "(PEERLAB_IMAGE)")
            raise RuntimeError(f"{len(late)} pods not running after {timeout:.0f}s, e.g. "
                               + "; ".join(f"{p} ({why.get(p, 'not created')})" for p in late[:3]) + hint)
        return ready

    @staticmethod
    def _pod_event(pod: Any, wanted: set[str], ready: dict[str, str], why: dict[str, str]) -> bool:
        """Note one watched pod's state; True once every wanted pod runs."""
        name = pod.metadata.name
        if name not in wanted:
            return False
        statuses = pod.status.container_statuses or []
        if (pod.status.phase == "Running" and pod.status.pod_ip and statuses
                and all(s.state.running for s in statuses)):
            ready[name] = pod.status.pod_ip
        else:
            ready.pop(name, None)
            waiting = [s.state.waiting.reason for s in statuses if s.state and s.state.waiting]
            conditions = [c.message for c in pod.status.conditions or [] if c.message]
            why[name] = f"{pod.status.phase}: {', '.join(waiting + conditions) or 'starting'}"
        return set(ready) == wanted

    def exec(self, pod: str, container: str, argv: list[str], stdin: str | None = None,
             timeout: float = 60, namespace: str | None = None) -> ExecResult:
        """Run argv in a container of the pod (of the run's namespace, or `namespace`), at most `timeout` seconds."""
        resp = kube_exec.open_stream(self.config, namespace or self.namespace, pod, container, argv, stdin is not None)
        return kube_exec.run(resp, stdin, timeout)

    # the shaping daemon, one per cluster node ---------------------------------------------------
    def shapers(self) -> dict[str, str]:
        """cluster node -> the shaping daemon's running pod there."""
        pods = self.core.list_namespaced_pod(self.shaper_namespace, label_selector=SHAPER_LABEL,
                                             _request_timeout=REST_TIMEOUT).items
        self._shaper_pods = {p.spec.node_name: p.metadata.name for p in pods
                             if p.spec.node_name and p.status.phase == "Running" and not p.metadata.deletion_timestamp}
        return dict(self._shaper_pods)

    def _shaper(self, node: str) -> str:
        if node not in self._shaper_pods:
            self._shaper_pods = self.shapers()
        if node not in self._shaper_pods:
            raise RuntimeError(f"no shaping daemon runs on cluster node {node} (namespace {self.shaper_namespace}, "
                               f"label {SHAPER_LABEL}): {SHAPER_HELP}")
        return self._shaper_pods[node]

    def shaper_lines(self, node: str) -> kube_exec.ExecLines:
        """The shaper agent of the node's daemon, started for this run and kept open on one exec stream."""
        from orchestrator.shaping import agent
        pod = self._shaper(node)
        return kube_exec.ExecLines(kube_exec.open_stream(self.config, self.shaper_namespace, pod, SHAPER_CONTAINER,
                                                         agent.ARGV, True), pod)

    def shaper_exec(self, node: str, argv: list[str], timeout: float = 60) -> ExecResult:
        return self.exec(self._shaper(node), SHAPER_CONTAINER, argv, timeout=timeout, namespace=self.shaper_namespace)

    def pod_netns(self, pods_by_node: dict[str, list[str]], agents: dict[str, Any]) -> dict[str, str]:
        """Each pod's network namespace file, as its node's daemon sees it: asked of that daemon's open
        shaper agent (agents: cluster node -> agent.ShaperAgent), which looks through the CRI."""
        found: dict[str, str] = {}
        for some in side_by_side(lambda node: agents[node].pods_netns(self.namespace, pods_by_node[node]),
                                 list(pods_by_node)):  # the nodes' daemons each at once
            found.update(some)
        return found

    def python_in_netns(self, node: str, netns: str) -> list[str]:
        """The command of a local process that is a Python in a pod's network namespace, started by the
        daemon of its cluster node (kube_exec.bridge)."""
        from orchestrator.shaping import agent
        return [*kube_exec.command(self.shaper_namespace, self.context, self._shaper(node), SHAPER_CONTAINER),
                *agent.python_in(netns)]

    def logs(self, pod: str, container: str, tail: int | None = None) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod, self.namespace, container=container, tail_lines=tail,
                                                     _request_timeout=REST_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - a pod already gone has no logs to show
            return f"(no output: {err.__class__.__name__})"

    def pod_placement(self, selector: str) -> dict[str, tuple[str, str]]:
        """Each pod's cluster node (spec.nodeName: pods on one node read one clock) and uid (a pod
        replaced later has another), in one list call."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector, _request_timeout=REST_TIMEOUT)
        return {p.metadata.name: (p.spec.node_name or "", p.metadata.uid) for p in pods.items}

    def boot_ids(self, nodes: list[str]) -> dict[str, str]:
        """Each cluster node's kernel boot id (status.nodeInfo.bootID): a kind node, a container on
        this machine, has this machine's (/proc/sys/kernel/random/boot_id)."""
        return {name: self.core.read_node(name, _request_timeout=REST_TIMEOUT).status.node_info.boot_id
                for name in nodes}

    def pod_uid(self, pod: str) -> str | None:
        try:
            return self.core.read_namespaced_pod(pod, self.namespace, _request_timeout=REST_TIMEOUT).metadata.uid
        except Exception:  # noqa: BLE001
            return None

    # HTTP to a pod's port, through the API server ----------------------------------------------
    def pod_http(self, pod: str, port: int, method: str, path: str, token: str, body: dict | None = None,
                 timeout: float = REST_TIMEOUT) -> tuple[int, bytes]:
        """One request to `path` on the pod's `port` through the API server's pod proxy, `body` sent as
        JSON, with the run's token in X-Peerlab-Token (the proxy keeps Authorization for itself):
        (status, the answer's bytes). Raises
        RuntimeError when no answer comes (the API server or the pod unreachable, or `timeout`)."""
        from urllib3.exceptions import HTTPError

        url = f"{self.config.host}/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy{path}"
        headers = {"X-Peerlab-Token": token, "Content-Type": "application/json"}
        self.api_client.update_params_for_auth(headers, [], ["BearerToken"], url, method, body)
        try:
            resp = self.api_client.call_api(method, url, header_params=headers, body=body,
                                            _request_timeout=(REST_TIMEOUT, timeout))
            return resp.status, resp.read() or b""
        except HTTPError as err:
            raise RuntimeError(f"{method} {path} on pod {pod}:{port} through the API server: "
                               f"{err.__class__.__name__} {err}") from None

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


def clock_shifts() -> dict[str, int]:
    """$PEERLAB_K8S_CLOCK_SHIFTS ({"<cluster node>": ns}): the chart's clockShiftNs, which moves the
    clock of peerlab's nodes on those cluster nodes (a test of the clock correction); else none."""
    raw = os.environ.get("PEERLAB_K8S_CLOCK_SHIFTS")
    if not raw:
        return {}
    try:
        shifts = json.loads(raw)
        return {str(node): int(ns) for node, ns in shifts.items()}
    except (ValueError, TypeError, AttributeError):
        raise RuntimeError(f'PEERLAB_K8S_CLOCK_SHIFTS is not {{"<cluster node>": ns, ...}}: {raw[:200]}') from None


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
