"""The Kubernetes client side of the kubernetes backend (orchestrator/backends/kube_cluster.py), against
recorded and scripted API answers: no Kubernetes server can run here. Each test is a failure mode
of a real API server: a REST call racing an exec, an exec stream that closes without a status or
never ends, a warning on stderr, an expired watch, a namespace whose Pod Security would reject the
pods."""
import asyncio
import functools
import json
import threading
from types import SimpleNamespace

import kubernetes.stream
import kubernetes.watch
import pytest
from aiohttp import web
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream as real_stream
from kubernetes.stream.ws_client import WSClient

from orchestrator.backends import kube_exec
from orchestrator.backends.kube_cluster import KubeCluster
from orchestrator.backends.kube_exec import NO_STATUS, TIMED_OUT, ExecResult
from orchestrator.backends.kubernetes import KubernetesBackend
from tests.support.kubeconfig import KUBECONFIG


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> KubeCluster:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    return KubeCluster("peerlab-test")


def closed_stream(stdout: str = "", stderr: str = "", status: str | None = '{"status": "Success"}') -> WSClient:
    """The library's own WSClient in the state a finished exec leaves it: socket closed, channels
    buffered (1 stdout, 2 stderr, 3 the status; no status when the connection just dropped)."""
    ws = WSClient.__new__(WSClient)
    ws._connected, ws._returncode, ws.binary, ws.newline = False, None, False, "\n"
    ws._channels = {k: v for k, v in {1: stdout, 2: stderr, 3: status}.items() if v}
    ws._closed_channels = set()
    ws.sock = None
    ws.close = lambda **_: None
    return ws


class HangingStream:
    """A command that never ends: the socket stays open and nothing more arrives."""

    def write_stdin(self, data):
        pass

    def run_forever(self, timeout=None):
        assert timeout, "would wait forever"

    def is_open(self):
        return True

    def read_stdout(self, timeout=None):
        assert timeout == 0, "a read without a timeout on an open socket blocks forever"
        return "partial"

    read_stderr = read_stdout

    def close(self):
        pass


def scripted_stream(monkeypatch, answer, seen: list):
    """kubernetes.stream.stream with its real client swapping, over a scripted transport that notes
    what the shared client's call_api was while the exec connected."""
    def websocket_call(configuration, method, url, **kwargs):
        seen.append(url)
        return answer
    monkeypatch.setattr(kubernetes.stream, "stream",
                        functools.partial(real_stream.func, websocket_call, None))


def test_exec_runs_on_its_own_client_so_rest_calls_meanwhile_stay_rest(cluster, monkeypatch):
    shared = cluster.core.api_client.call_api
    during: list = []

    def websocket_call(configuration, method, url, **kwargs):
        during.append(cluster.core.api_client.call_api == shared)  # what another thread's REST call would use
        return closed_stream('{"running": false}\n')
    monkeypatch.setattr(kubernetes.stream, "stream", functools.partial(real_stream.func, websocket_call, None))
    result = cluster.exec("pl1-nodes-0", "node", ["true"])
    assert result == ExecResult(0, '{"running": false}\n', "")
    assert during == [True]


def test_a_stream_closed_without_status_is_a_failure_not_a_crash(cluster, monkeypatch):
    seen: list = []
    scripted_stream(monkeypatch, closed_stream("half an answ", status=None), seen)
    result = cluster.exec("pl1-nodes-0", "node", ["cat", "/x"])
    assert result.code == NO_STATUS and "without an exit status" in result.stderr
    assert "/exec?" in seen[0] and "container=node" in seen[0]


def test_a_command_that_never_ends_returns_after_its_timeout(cluster, monkeypatch):
    scripted_stream(monkeypatch, HangingStream(), [])
    result = cluster.exec("pl1-nodes-0", "node", ["sleep", "1000"], timeout=0.1)
    assert result.code == TIMED_OUT and result.stdout == "partial" and "did not end within" in result.stderr


def test_an_exec_whose_handshake_hangs_fails_after_the_connect_timeout(cluster, monkeypatch):
    monkeypatch.setattr(kube_exec, "CONNECT_TIMEOUT", 0.2)
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: __import__("time").sleep(5))
    with pytest.raises(RuntimeError, match="no answer from the API server"):
        cluster.exec("pl1-nodes-0", "node", ["true"])


def test_the_supervisors_answer_or_what_came_instead_is_named():
    """A refused dial is the API server's Status (503), an error the supervisor's own JSON; either way
    the request fails naming the pod and why, after its retries."""
    status = {"running": True, "pid": 7, "starts": 1, "exit_code": None}
    refused = (503, b'{"kind":"Status","status":"Failure","message":"error trying to reach service: dial tcp '
                    b'10.244.1.5:7001: connect: connection refused","reason":"ServiceUnavailable","code":503}')
    answers = iter([refused, (200, json.dumps(status).encode()),
                    (409, b'{"error": "the node is running; kill it or wait for it first"}')])
    backend = KubernetesBackend.__new__(KubernetesBackend)
    backend.cluster = SimpleNamespace(pod_http=lambda *a, **k: next(answers))
    backend.ctx = SimpleNamespace(token="t" * 16)
    backend.pods, backend._status = {"n0": "pl1-nodes-0"}, {}
    with pytest.raises(RuntimeError, match=r"pod pl1-nodes-0: HTTP 503: error trying to reach service.*refused"):
        backend._supervisor("n0", "GET", "/status")
    assert backend._supervisor("n0", "GET", "/status") == status
    with pytest.raises(RuntimeError, match="pl1-nodes-0: the node is running; kill it"):
        backend._supervisor("n0", "POST", "/start", {"node_id": "n0"})


def pod(name: str, ip: str) -> SimpleNamespace:
    running = SimpleNamespace(state=SimpleNamespace(running=True, waiting=None))
    return SimpleNamespace(metadata=SimpleNamespace(name=name),
                           status=SimpleNamespace(phase="Running", pod_ip=ip, container_statuses=[running, running],
                                                  conditions=[]))


def test_an_expired_watch_is_listed_and_watched_again(cluster, monkeypatch):
    rounds = iter([[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}],
                   ApiException(status=410, reason="Gone"),
                   [{"type": "ADDED", "object": pod("pl1-nodes-0", "10.0.0.5")},
                    {"type": "ADDED", "object": pod("pl1-nodes-1", "10.0.0.6")}]])
    calls: list = []

    class ScriptedWatch:
        def stream(self, fn, *args, **kwargs):
            calls.append(kwargs)
            step = next(rounds)
            if isinstance(step, Exception):
                raise step
            yield from step

        def stop(self):
            pass
    monkeypatch.setattr(kubernetes.watch, "Watch", ScriptedWatch)
    ips = cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0", "pl1-nodes-1"], timeout=10)
    assert ips == {"pl1-nodes-0": "10.0.0.5", "pl1-nodes-1": "10.0.0.6"}
    assert len(calls) == 3 and all(c["_request_timeout"] for c in calls)


def watch_of(pod: SimpleNamespace) -> type:
    """A watch that sees `pod` once, as it is, every time it is opened."""
    class ScriptedWatch:
        def stream(self, fn, *args, **kwargs):
            yield {"type": "ADDED", "object": pod}

        def stop(self):
            pass
    return ScriptedWatch


def test_pods_whose_image_the_cluster_cannot_get_are_named_with_how_to_give_it_the_image(cluster, monkeypatch):
    waiting = SimpleNamespace(state=SimpleNamespace(running=None, waiting=SimpleNamespace(reason="ImagePullBackOff")))
    stuck = SimpleNamespace(metadata=SimpleNamespace(name="pl1-nodes-0"),
                            status=SimpleNamespace(phase="Pending", pod_ip=None, container_statuses=[waiting, waiting],
                                                   conditions=[]))
    monkeypatch.setattr(kubernetes.watch, "Watch", watch_of(stuck))
    with pytest.raises(RuntimeError, match=r"pl1-nodes-0 \(Pending: ImagePullBackOff.*peerlab image build "
                                           r"--implementation all.*peerlab cluster load"):
        cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0"], timeout=0.5)


@pytest.mark.slow
def test_a_run_stopped_while_its_pods_start_stops_waiting_within_a_watch(cluster, monkeypatch):
    """A SIGTERM while 100 pods are being made: the wait ends within one watch's few seconds (a watch
    with nothing new blocks for its whole timeout, as the API server's does), not at its timeout."""
    import threading
    import time

    from orchestrator.backends import kube_cluster
    pending = SimpleNamespace(metadata=SimpleNamespace(name="pl1-nodes-0"),
                              status=SimpleNamespace(phase="Pending", pod_ip=None, container_statuses=[],
                                                     conditions=[]))

    class QuietWatch:
        def stream(self, fn, *args, timeout_seconds, **kwargs):
            yield {"type": "ADDED", "object": pending}
            time.sleep(timeout_seconds)

        def stop(self):
            pass
    monkeypatch.setattr(kubernetes.watch, "Watch", QuietWatch)
    stopping = threading.Event()
    threading.Timer(0.5, stopping.set).start()

    def check_stop():
        if stopping.is_set():
            raise InterruptedError("stopped by a signal")
    started = time.monotonic()
    with pytest.raises(InterruptedError):
        cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0"], timeout=60, check_stop=check_stop)
    assert time.monotonic() - started < kube_cluster.WATCH_S + 1.5


def test_a_pod_that_failed_is_named_at_once_with_why(cluster, monkeypatch):
    """A pod the kubelet refused or ended (here: no room on its node) never runs: the wait ends at its
    first sight, not after its timeout, naming the reason and the kubelet's message."""
    failed = SimpleNamespace(metadata=SimpleNamespace(name="pl1-nodes-0"),
                             status=SimpleNamespace(phase="Failed", pod_ip=None, container_statuses=[], conditions=[],
                                                    reason="OutOfcpu",
                                                    message="Pod Node didn't have enough resource: cpu"))
    monkeypatch.setattr(kubernetes.watch, "Watch", watch_of(failed))
    started = __import__("time").monotonic()
    with pytest.raises(RuntimeError, match=r"pod pl1-nodes-0 failed: OutOfcpu: Pod Node didn't have enough resource"):
        cluster.wait_pods("peerlab.run=000001", ["pl1-nodes-0"], timeout=30)
    assert __import__("time").monotonic() - started < 5


class NamespaceApi:
    def __init__(self, existing_labels=None, status=404):
        self.existing, self.status, self.created, self.kwargs = existing_labels, status, [], []

    def read_namespace(self, name, **kwargs):
        self.kwargs.append(kwargs)
        if self.existing is None:
            raise ApiException(status=self.status)
        return SimpleNamespace(metadata=SimpleNamespace(labels=self.existing))

    def create_namespace(self, body, **kwargs):
        self.created.append(body)


def test_the_namespace_is_created_restricted_and_one_that_exists_is_kept(cluster):
    """The pods hold no capability and set no sysctl (their daemon sets their TCP, dilated or not):
    a namespace peerlab makes is `restricted`; one that exists is used as it is."""
    cluster.core = NamespaceApi()
    cluster.ensure_namespace()
    (made,) = cluster.core.created
    assert made.metadata.name == "peerlab-test"
    assert made.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert cluster.core.kwargs[0]["_request_timeout"]
    cluster.core = NamespaceApi({"pod-security.kubernetes.io/enforce": "restricted"})
    cluster.ensure_namespace()
    assert cluster.core.created == []
    cluster.core = NamespaceApi(status=403)  # may not read namespaces: left to helm
    cluster.ensure_namespace()
    assert cluster.core.created == []


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


def test_control_requests_reach_the_pods_port_through_the_api_server_proxy(tmp_path, monkeypatch):
    """A request made: to the API server of the kubeconfig, at the pod proxy path of the pod's control
    port, with the kubeconfig's credentials; the node's token in its own header."""
    seen: list = []

    async def main() -> dict:
        async def api_server(request: web.Request) -> web.Response:
            seen.append((request.path, request.headers.get("Authorization"), request.headers.get("X-Peerlab-Token")))
            return web.json_response({"ok": True})
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", api_server)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        (tmp_path / "kubeconfig").write_text(KUBECONFIG.replace("https://127.0.0.1:1", f"http://127.0.0.1:{port}"))
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        client = KubeCluster("peerlab-ci").control_client("pl123456-nodes-3", 7000, "n3", "t" * 32)
        try:
            return await client.get("/healthz")
        finally:
            await client.close()
            await runner.cleanup()

    assert asyncio.run(main()) == {"ok": True}
    assert seen == [("/api/v1/namespaces/peerlab-ci/pods/pl123456-nodes-3:7000/proxy/healthz",
                     "Bearer sekrit-token", "t" * 32)]


def test_supervisor_requests_reach_the_pods_port_through_the_api_server_proxy(tmp_path, monkeypatch):
    """The sync path the backend's supervisor calls take: method, path and query, the JSON body, the
    kubeconfig's credentials and the node token, the answer's status and bytes as they came."""
    seen: list = []
    ready = threading.Event()
    port: list[int] = []

    async def api_server(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs, request.headers.get("Authorization"),
                     request.headers.get("X-Peerlab-Token"), await request.read()))
        return web.Response(status=409, body=b'{"error": "running"}', content_type="application/json")

    def serve() -> None:
        async def main() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", api_server)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port.append(runner.addresses[0][1])
            ready.set()
            await asyncio.sleep(30)
        asyncio.run(main())
    threading.Thread(target=serve, daemon=True).start()
    assert ready.wait(10)
    (tmp_path / "kubeconfig").write_text(KUBECONFIG.replace("https://127.0.0.1:1", f"http://127.0.0.1:{port[0]}"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    cluster = KubeCluster("peerlab-ci")
    assert cluster.pod_http("pl1-nodes-3", 7001, "POST", "/start", "t" * 32, {"node_id": "n3"}) == \
        (409, b'{"error": "running"}')
    assert cluster.pod_http("pl1-nodes-3", 7001, "GET", "/events?offset=12", "t" * 32)[0] == 409
    assert seen == [("POST", "/api/v1/namespaces/peerlab-ci/pods/pl1-nodes-3:7001/proxy/start", "Bearer sekrit-token",
                     "t" * 32, b'{"node_id": "n3"}'),
                    ("GET", "/api/v1/namespaces/peerlab-ci/pods/pl1-nodes-3:7001/proxy/events?offset=12",
                     "Bearer sekrit-token", "t" * 32, b"")]
    cluster.config.host = "http://127.0.0.1:1"
    with pytest.raises(RuntimeError, match="GET /status on pod pl1-nodes-3:7001 through the API server"):
        KubeCluster.pod_http(cluster, "pl1-nodes-3", 7001, "GET", "/status", "t" * 32)


def test_an_insecure_kubeconfig_skips_tls_verification_only_when_it_says_so(cluster):
    assert cluster._ssl_context() is False  # insecure-skip-tls-verify: true
    cluster.config.verify_ssl = True
    assert cluster._ssl_context().verify_mode.name == "CERT_REQUIRED"


def test_an_api_server_nobody_answers_is_named_before_anything_is_installed(cluster, monkeypatch):
    from orchestrator.backends import kube_cluster as kc

    monkeypatch.setattr(kc, "REST_TIMEOUT", 2)
    cluster.core.api_client.rest_client.pool_manager.connection_pool_kw["retries"] = 0
    with pytest.raises(RuntimeError, match=r"API server at https://127.0.0.1:1 does not answer"):
        cluster.ensure_namespace()


class LineStream:
    """An open exec stream of a long-lived command: what it prints arrives in the frames given, then
    the socket closes (or, with `stays_open`, nothing more comes)."""

    def __init__(self, frames: list[tuple[int, str]], stays_open: bool = False):
        self.frames, self.stays_open, self.sent = list(frames), stays_open, []
        self.ws = closed_stream("", "", status=None)

    def write_stdin(self, data):
        self.sent.append(data)

    def readline_stdout(self, timeout=None):
        while True:
            data = self.ws._channels.get(1, "")
            if "\n" in data:
                line, _, rest = data.partition("\n")
                self.ws._channels[1] = rest
                return line
            if not self.frames:
                return None
            channel, text = self.frames.pop(0)
            self.ws._channels[channel] = self.ws._channels.get(channel, "") + text

    def peek_stderr(self):
        return bool(self.ws._channels.get(2))

    def read_stderr(self):
        return self.ws._channels.pop(2, "")

    def is_open(self):
        return self.stays_open

    def close(self):
        pass


def test_a_long_lived_command_is_spoken_to_a_line_at_a_time_and_its_end_says_why():
    stream = LineStream([(1, '{"done": [1'), (1, ']}\n{"done"'), (2, "Traceback ...\nOSError: no such device\n"),
                         (1, ": []}\n")])
    lines = kube_exec.ExecLines(stream, "pl1-nodes-0")
    lines.send('{"ops": []}')
    assert stream.sent == ['{"ops": []}\n']
    assert lines.receive(5) == '{"done": [1]}'  # a line split over frames comes whole
    assert lines.receive(5) == '{"done": []}'
    with pytest.raises(RuntimeError, match="pod pl1-nodes-0 closed: Traceback ...\nOSError: no such device"):
        lines.receive(5)
    silent = kube_exec.ExecLines(LineStream([], stays_open=True), "pl1-nodes-1")
    with pytest.raises(RuntimeError, match="pl1-nodes-1 gave no line in 2 s"):
        silent.receive(2)


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
