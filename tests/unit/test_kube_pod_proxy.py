"""Requests to a pod's ports through the API server's pod proxy: the supervisor's answer, or what came
instead (the API server's Status), named; the control client's and the supervisor calls' requests as a
scripted API server receives them; TLS verification as the kubeconfig says."""
import asyncio
import json
import threading
from types import SimpleNamespace

import pytest
from aiohttp import web

from orchestrator.backends.kube_cluster import KubeCluster
from orchestrator.backends.kubernetes import KubernetesBackend
from tests.support.kubeconfig import KUBECONFIG


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
