"""The node's control API (aiohttp): never shaped, never counted as protocol traffic, bearer token.

Locally it listens on a Unix socket, in containers on TCP. The token comes as `X-Peerlab-Token: T`
(what the orchestrator sends: on Kubernetes it goes through the API server's pod proxy, which keeps
the Authorization header for itself) or `Authorization: Bearer T`. Endpoints: GET /healthz, /status,
/metrics, /clock (the node's clock, dilated in a dilated run, for offset estimation), /loop_lag?from=N (node/process/looplag.py); POST /start, /publish, /subscribe, /unsubscribe, /stop, /links (degrade or restore links),
/calibrate/ping, /calibrate/throughput.
"""
from __future__ import annotations

import asyncio
import hmac
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from node.protocols import Unsupported, get_protocol

STOP_GRACE_S = 1.0  # real seconds a request in hand at stop may still take

if TYPE_CHECKING:
    from node.process.runtime import NodeRuntime


class _NodeCollector:
    def __init__(self, rt: "NodeRuntime"):
        self.rt = rt

    def collect(self):
        events = CounterMetricFamily("peerlab_events", "events written to the log, by type", labels=["type"])
        for type_, count in sorted(self.rt.events.counts.items()):
            events.add_metric([type_], count)
        yield events
        yield GaugeMetricFamily("peerlab_connected_peers", "data connections up",
                                value=len(self.rt.transport.connections))
        yield CounterMetricFamily("peerlab_published", "messages published", value=self.rt.published)
        yield CounterMetricFamily("peerlab_delivered", "messages delivered to the app", value=self.rt.delivered)


def _auth(token: str):
    expected = token.encode()

    @web.middleware
    async def middleware(request: web.Request, handler):
        given = request.headers.get("X-Peerlab-Token", "")
        if not given and request.headers.get("Authorization", "").startswith("Bearer "):
            given = request.headers["Authorization"][len("Bearer "):]
        if not hmac.compare_digest(given.encode(), expected):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        return await handler(request)
    return middleware


@web.middleware
async def _unsupported(request: web.Request, handler):
    try:
        return await handler(request)
    except Unsupported as err:
        return web.json_response({"error": str(err)}, status=400)


async def _body(request: web.Request, *required: str) -> dict[str, Any]:
    try:
        body = await request.json()
    except Exception:  # noqa: BLE001 - any unreadable body is the client's error
        raise web.HTTPBadRequest(text="body must be a JSON object")
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    missing = [k for k in required if k not in body]
    if missing:
        raise web.HTTPBadRequest(text=f"missing fields: {', '.join(missing)}")
    return body


def build_app(rt: "NodeRuntime") -> web.Application:
    registry = CollectorRegistry()
    registry.register(_NodeCollector(rt))
    routes = web.RouteTableDef()

    @routes.get("/healthz")
    async def healthz(_: web.Request):
        return web.json_response({"ok": True, "state": rt.state})

    @routes.get("/clock")
    async def clock(_: web.Request):
        return web.json_response({"ns": rt.dilation.time_ns()})

    @routes.get("/status")
    async def status(_: web.Request):
        return web.json_response(rt.status())

    @routes.get("/loop_lag")
    async def loop_lag(request: web.Request):
        try:
            start = int(request.query.get("from", 0))
        except ValueError:
            raise web.HTTPBadRequest(text="from must be an integer")
        return web.json_response(rt.loop_lag.window(start))

    @routes.get("/metrics")
    async def metrics(_: web.Request):
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    @routes.post("/start")
    async def start(request: web.Request):
        body = await _body(request, "t0")
        return web.json_response({"armed": rt.start(int(body["t0"]))})

    @routes.post("/publish")
    async def publish(request: web.Request):
        body = await _body(request, "topic")
        return web.json_response({"msg_id": rt.publish(str(body["topic"]), int(body.get("size", 1024)))})

    @routes.post("/subscribe")
    async def subscribe(request: web.Request):
        body = await _body(request, "topic")
        rt.core.subscribe(str(body["topic"]))
        return web.json_response({"ok": True})

    @routes.post("/unsubscribe")
    async def unsubscribe(request: web.Request):
        body = await _body(request, "topic")
        rt.core.unsubscribe(str(body["topic"]))
        return web.json_response({"ok": True})

    def topic_action(name: str):
        async def handler(request: web.Request):
            body = await _body(request, "topic")
            getattr(rt.core, name)(str(body["topic"]))
            return web.json_response({"ok": True})
        return handler

    for name in get_protocol(rt.cfg.protocol).control_actions:  # its own operations (PulsarCast: history)
        routes.post(f"/{name}")(topic_action(name))

    @routes.post("/stop")
    async def stop(request: web.Request):
        body = await _body(request) if request.can_read_body else {}
        # answer first, then stop, so the caller sees the acknowledgement
        asyncio.get_running_loop().call_later(0.05, rt.stop, str(body.get("reason", "requested")))
        return web.json_response({"ok": True})

    @routes.post("/links")
    async def links(request: web.Request):
        body = await _body(request, "node")
        node = str(body["node"])
        if node != rt.node_id and node not in rt.cfg.peers:
            raise web.HTTPBadRequest(text=f"node {node!r} is neither this node nor one of its peers")
        try:
            delay_ms, loss = float(body.get("delay_ms", 0.0)), float(body.get("loss", 0.0))
            jitter_ms = float(body.get("jitter_ms", 0.0))
        except (TypeError, ValueError):
            raise web.HTTPBadRequest(text="delay_ms, jitter_ms and loss must be numbers")
        if not (0 <= delay_ms <= 60_000 and 0 <= jitter_ms <= 60_000 and 0 <= loss < 1):
            raise web.HTTPBadRequest(text="delay_ms and jitter_ms must be in [0, 60000] and loss in [0, 1)")
        rt.degrade(node, delay_ms, loss, jitter_ms)
        return web.json_response({"ok": True})

    @routes.post("/calibrate/ping")
    async def ping(request: web.Request):
        body = await _body(request, "peer")
        try:
            rtts = await rt.ping(str(body["peer"]), int(body.get("count", 3)))
        except (ConnectionError, asyncio.TimeoutError) as err:
            return web.json_response({"error": str(err) or "timeout"}, status=409)
        return web.json_response({"rtt_ms": rtts})

    @routes.post("/calibrate/throughput")
    async def throughput(request: web.Request):
        body = await _body(request, "peer", "bytes")
        try:
            mbit = await rt.throughput(str(body["peer"]), int(body["bytes"]))
        except (ConnectionError, asyncio.TimeoutError) as err:
            return web.json_response({"error": str(err) or "timeout"}, status=409)
        return web.json_response({"mbit": mbit, "sent_bytes": int(body["bytes"])})

    app = web.Application(middlewares=[_auth(rt.cfg.control.token), _unsupported],
                          client_max_size=1024 * 1024)
    app.add_routes(routes)
    return app


async def serve_control(rt: "NodeRuntime") -> web.AppRunner:
    # at stop, a request still being handled gets STOP_GRACE_S, not aiohttp's 60 s: the orchestrator
    # gives a stopping node 10 s before it kills it, and its log must be whole by then
    runner = web.AppRunner(build_app(rt), access_log=None, handle_signals=False, shutdown_timeout=STOP_GRACE_S)
    await runner.setup()
    ctl = rt.cfg.control
    if ctl.unix:
        site: web.BaseSite = web.UnixSite(runner, ctl.unix)
    else:
        site = web.TCPSite(runner, ctl.host or "0.0.0.0", ctl.port or 7000)
    await site.start()
    return runner
