"""A Kubernetes API server stand-in (aiohttp, in a thread) that keeps objects and answers what peerlab and
helm ask: /version, nodes, namespaces, and any namespaced collection (resource quotas, leases, the Secrets helm keeps
its releases in) with list by label, create, get, merge-patch, replace (JSON; a protobuf body, as
helm sends to mark a release uninstalling, is acknowledged and changes nothing) and delete. No Kubernetes server can
run here; this is enough for the real helm binary to list and uninstall releases and for the kubernetes
client to hold leases. `KubeAPI.start(tmp_path)` writes a kubeconfig pointing at it."""
from __future__ import annotations

import asyncio
import base64
import gzip
import json
import socket
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

LIST_KINDS = {"namespaces": "NamespaceList", "secrets": "SecretList", "leases": "LeaseList", "resourcequotas": "ResourceQuotaList"}


def helm_release(name: str, namespace: str, status: str = "deployed", labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The Secret helm keeps a release in (storage driver `secret`): the release JSON, gzipped, base64
    (twice: helm's encoding, then the Secret's). An empty manifest: uninstalling deletes no resources.
    `labels`: the release's own (`helm install --labels`), which helm keeps on the Secret."""
    release = {"name": name, "namespace": namespace, "version": 1, "manifest": "", "config": {},
               "info": {"status": status, "first_deployed": "2026-11-25T00:00:00Z",
                        "last_deployed": "2026-11-25T00:00:00Z", "description": "Install complete"},
               "chart": {"metadata": {"name": "peerlab", "version": "0.1.0", "apiVersion": "v2"}}}
    data = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {"name": f"sh.helm.release.v1.{name}.v1", "namespace": namespace,
                         "labels": {**(labels or {}), "name": name, "owner": "helm", "status": status, "version": "1"}},
            "data": {"release": base64.b64encode(data).decode()}}


def _selected(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if (key not in labels) if not eq else labels.get(key) != value:
            return False
    return True


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _status(code: int, reason: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                              "reason": reason, "message": reason}, status=code)


class KubeAPI:
    def __init__(self, nodes: list[dict[str, Any]] | None = None, forbidden: set[str] = frozenset()):
        """`forbidden`: collections (e.g. {"leases"}) whose writes are refused with 403, as RBAC would."""
        self.nodes = nodes or []
        self.forbidden = forbidden
        self.store: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # (namespace, kind) -> name -> object
        self.requests: list[str] = []
        self.version = 0

    def put(self, namespace: str, kind: str, obj: dict[str, Any]) -> None:
        self.store.setdefault((namespace, kind), {})[obj["metadata"]["name"]] = obj

    def objects(self, namespace: str, kind: str) -> dict[str, dict[str, Any]]:
        return self.store.get((namespace, kind), {})

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append(f"{request.method} {request.path_qs}")
        parts = request.path.strip("/").split("/")
        if parts == ["version"]:
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
        if parts == ["api", "v1", "nodes"]:
            return web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": self.nodes})
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:  # the namespaces themselves
            namespace, kind, name = "", "namespaces", (parts[3:] or [None])[0]
        else:
            try:
                at = parts.index("namespaces")
                namespace, kind, name = parts[at + 1], parts[at + 2], (parts[at + 3:] or [None])[0]
            except (ValueError, IndexError):
                return _status(404, "NotFound")
        items = self.store.setdefault((namespace, kind), {})
        if kind in self.forbidden and request.method != "GET":
            return _status(403, "Forbidden")
        if name is None and request.method == "GET":
            chosen = [o for o in items.values() if _selected(o, request.query.get("labelSelector", ""))]
            return web.json_response({"kind": LIST_KINDS.get(kind, "List"), "apiVersion": "v1",
                                      "metadata": {"resourceVersion": "1"}, "items": chosen})
        if name is None and request.method == "POST":
            obj = json.loads(await request.read())
            if obj["metadata"]["name"] in items:
                return _status(409, "AlreadyExists")
            self.version += 1
            obj["metadata"].update(namespace=namespace, resourceVersion=str(self.version))
            items[obj["metadata"]["name"]] = obj
            return web.json_response(obj, status=201)
        if name not in items:
            return _status(404, "NotFound")
        if request.method == "GET":
            return web.json_response(items[name])
        if request.method == "DELETE":
            items.pop(name)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        raw = await request.read()
        if not raw.startswith(b"{"):  # helm replaces its release Secret in protobuf: acknowledged, kept as it was
            return web.json_response(items[name])
        body = json.loads(raw)
        if request.method == "PATCH":
            _merge(items[name], body)
        elif request.method == "PUT":
            items[name] = body
        return web.json_response(items[name])

    def start(self, directory: Path, namespace: str = "lab") -> Path:
        """Serve on a free port from a thread; returns the path of a kubeconfig that points at it."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", port).start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u, namespace: {namespace}}}}}]
current-context: ctx
""")
        return kubeconfig

    def stop(self) -> None:
        # close the server and the clients' kept-alive connections in the loop that holds them; left
        # pending, their handlers are collected during a later test, which then warns about them
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
