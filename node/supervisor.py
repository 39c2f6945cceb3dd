"""The node supervisor: the main process of a node's container where the orchestrator does not own
the container's life (a Kubernetes pod). It holds the node process and starts, kills and reports it
on request, so that a node can be down for a while, crash with SIGKILL and come back with the same
identity while its pod (network namespace, address, tc tree) stays as it is.

    python -m node.supervisor serve [--port P]      the container's command: an HTTP API on port P (7001)
    python -m node.supervisor start < CONFIG        start the node with this config (one JSON line)
    python -m node.supervisor stop                  SIGTERM the node (it stops its own way)
    python -m node.supervisor kill                  SIGKILL the node; answers once it is gone
    python -m node.supervisor wait [--timeout S]    until the node exits (or S seconds pass)
    python -m node.supervisor status                {"running", "pid", "starts", "exit_code"}

The API (the orchestrator's way in, through the API server's pod proxy as for the node's control
API; the commands above are its client, for a person in the pod): POST /start (body: the node's
config), /stop, /kill; GET /status, /wait?timeout=S, /events?offset=N (the node's event log from byte
N: how an adapter's readiness is followed and every log is collected, with no exec). Every request
carries the run's token (PEERLAB_CONTROL_TOKEN) as the node's control API takes it. The node's own
output goes to the container's output. SIGTERM (pod deletion) is passed on to the node.

The node is peerlab's own (`python -m node --config FILE`) unless PEERLAB_NODE_COMMAND holds another
command as a JSON list, with `{config}` where the config file's path goes: the chart sets it for the
pods of an adapter's node group (node/adapters), whose images carry this module beside the adapter.
The standard library only: adapters' images carry this file and no Python package.
"""
from __future__ import annotations

import argparse
import hmac
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

COMMAND_ENV = "PEERLAB_NODE_COMMAND"
TOKEN_ENV = "PEERLAB_CONTROL_TOKEN"
TOKEN_HEADER = "X-Peerlab-Token"  # as the node's control API takes it (the pod proxy keeps Authorization)
PORT = 7001
MAX_BODY = 1 << 20  # a node's config is a few KB


def standby_command() -> list[str] | None:
    """peerlab's node made ready ahead of time (`python -m node --standby`); None for an adapter's."""
    return None if os.environ.get(COMMAND_ENV) else [sys.executable, "-m", "node", "--standby"]


def node_command(config_path: str) -> list[str]:
    """The node's command: PEERLAB_NODE_COMMAND's (a JSON list; {config} filled in), else peerlab's node."""
    raw = os.environ.get(COMMAND_ENV)
    if not raw:
        return [sys.executable, "-m", "node", "--config", config_path]
    try:
        command = json.loads(raw)
    except ValueError:
        command = None
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        raise ValueError(f"{COMMAND_ENV} must be a JSON list of strings, not {raw!r}")
    return [part.replace("{config}", config_path) for part in command]


class Supervisor:
    """The node process and what is known of it; every method is safe from any request's thread.

    For peerlab's node a standby is kept (`python -m node --standby`: imported, waiting for its
    config's path on stdin): a start hands it the config, and once a node has exited the next standby
    is made, so that a start or a restart costs no interpreter start (half a CPU-second each, 30 of
    them at once on 2 cores: seconds)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.proc: subprocess.Popen | None = None
        self.standby: subprocess.Popen | None = None
        self.starts = 0
        self.event_log: str | None = None  # the running (or last) node's, from its config
        self.lock = threading.Lock()
        self.ending = False

    def prepare(self) -> None:
        """A standby ready, if peerlab's node is the pod's and none is (call with the lock held)."""
        command = standby_command()
        if command and not self.ending and (self.standby is None or self.standby.poll() is not None):
            self.standby = subprocess.Popen(command, stdin=subprocess.PIPE)

    def _after(self, proc: subprocess.Popen) -> None:
        proc.wait()
        with self.lock:
            self.prepare()

    def status(self) -> dict[str, Any]:
        proc = self.proc
        code = proc.poll() if proc is not None else None
        running = proc is not None and code is None
        return {"running": running, "pid": proc.pid if running and proc else None,
                "starts": self.starts, "exit_code": code}

    def start(self, config: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.status()["running"]:
                return {"error": "the node is running; kill it or wait for it first"}
            path = self.dir / "config.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(config))
            tmp.replace(path)
            standby, self.standby = self.standby, None
            self.proc = None
            if standby is not None and standby.poll() is None:
                assert standby.stdin is not None
                try:
                    standby.stdin.write(f"{path}\n".encode())
                    standby.stdin.close()
                    self.proc = standby
                except BrokenPipeError:  # it died meanwhile (out of memory?): a fresh start then
                    standby.wait()
            if self.proc is None:
                self.proc = subprocess.Popen(node_command(str(path)))
            threading.Thread(target=self._after, args=(self.proc,), daemon=True).start()
            self.starts += 1
            log = config.get("event_log")
            self.event_log = log if isinstance(log, str) else None
            return self.status()

    def wait(self, timeout: float) -> dict[str, Any]:
        proc = self.proc
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return self.status()

    def stop(self) -> dict[str, Any]:
        """SIGTERM; answers at once (`wait` follows the node down)."""
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
            return self.status()

    def kill(self) -> dict[str, Any]:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            return self.status()

    def events(self, offset: int) -> bytes:
        """The node's event log from byte `offset` (empty until a node has written one)."""
        if not self.event_log:
            return b""
        try:
            with open(self.event_log, "rb") as log:
                log.seek(offset)
                return log.read()
        except FileNotFoundError:
            return b""

    def end(self) -> None:
        """The pod is going: the node is told to stop, and killed if it has not in 8 s."""
        with self.lock:
            self.ending = True
            if self.standby is not None and self.standby.poll() is None:
                self.standby.kill()
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(8)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


def handler(sup: Supervisor, token: str) -> type[BaseHTTPRequestHandler]:
    expected = token.encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "peerlab-supervisor"

        def log_message(self, *_: Any) -> None:  # the container's output is the node's
            pass

        def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, answer: dict[str, Any], code: int | None = None) -> None:
            self._send(code or (400 if "error" in answer else 200), json.dumps(answer).encode())

        def _allowed(self) -> bool:
            given = self.headers.get(TOKEN_HEADER, "")
            if not given and self.headers.get("Authorization", "").startswith("Bearer "):
                given = self.headers["Authorization"][len("Bearer "):]
            if hmac.compare_digest(given.encode(), expected):
                return True
            self._json({"error": "missing or wrong bearer token"}, 401)
            return False

        def _number(self, query: dict[str, list[str]], name: str, default: float) -> float:
            value = float(query.get(name, [default])[0])
            if value < 0:
                raise ValueError(f"{name} must be >= 0")
            return value

        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if not self._allowed():
                return
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            try:
                if url.path == "/status":
                    self._json(sup.status())
                elif url.path == "/wait":
                    self._json(sup.wait(self._number(query, "timeout", 10.0)))
                elif url.path == "/events":
                    self._send(200, sup.events(int(self._number(query, "offset", 0))), "application/octet-stream")
                else:
                    self._json({"error": f"no GET {url.path}"}, 404)
            except ValueError as err:
                self._json({"error": str(err)})

        def do_POST(self) -> None:  # noqa: N802
            if not self._allowed():
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._json({"error": f"a body of {length} bytes: at most {MAX_BODY}"}, 413)
                return
            raw = self.rfile.read(length)
            path = urllib.parse.urlsplit(self.path).path
            if path == "/start":
                try:
                    config = json.loads(raw)
                    if not isinstance(config, dict):
                        raise ValueError("the body must be the node's config, a JSON object")
                    answer = sup.start(config)
                except (ValueError, OSError) as err:
                    answer = {"error": f"{err.__class__.__name__}: {err}"}
                self._json(answer, 409 if "is running" in answer.get("error", "") else None)
            elif path == "/stop":
                self._json(sup.stop())
            elif path == "/kill":
                self._json(sup.kill())
            else:
                self._json({"error": f"no POST {path}"}, 404)

    return Handler


def serve(directory: Path, host: str, port: int, token: str) -> None:
    sup = Supervisor(directory)
    directory.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer((host, port), handler(sup, token))
    server.daemon_threads = True
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with sup.lock:
        sup.prepare()
    threading.Thread(target=server.serve_forever, daemon=True, name="api").start()
    print(f"supervisor: waiting for requests on {server.server_address[0]}:{server.server_address[1]}", flush=True)
    done.wait()
    sup.end()
    server.shutdown()


def request(port: int, method: str, path: str, token: str, body: dict[str, Any] | None = None,
            timeout: float = 30) -> dict[str, Any]:
    """One request to the supervisor on this host's `port` (the commands' client)."""
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={TOKEN_HEADER: token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return json.loads(err.read() or b"{}") or {"error": f"HTTP {err.code}"}
    except (OSError, ValueError) as err:
        return {"error": f"no supervisor answers on port {port}: {err.__class__.__name__} {err}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.supervisor", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", choices=["serve", "start", "stop", "kill", "wait", "status"])
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("PEERLAB_SUPERVISOR_DIR", "/run/peerlab")),
                        help="serve: where the node's config is written")
    parser.add_argument("--host", default="0.0.0.0", help="serve: the address to listen on")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PEERLAB_SUPERVISOR_PORT", PORT)),
                        help=f"the API's port (default {PORT}; serve: 0 takes a free one and prints it)")
    parser.add_argument("--timeout", type=float, default=10.0, help="wait: seconds to wait for the node to exit")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        print(f"node.supervisor: {TOKEN_ENV} must hold the run's control token (16 characters or more)",
              file=sys.stderr)
        return 2
    if args.cmd == "serve":
        serve(args.dir, args.host, args.port, token)
        return 0
    if args.cmd == "start":
        answer = request(args.port, "POST", "/start", token, json.loads(sys.stdin.readline()))
    elif args.cmd == "wait":
        answer = request(args.port, "GET", f"/wait?timeout={args.timeout}", token, timeout=args.timeout + 15)
    elif args.cmd == "status":
        answer = request(args.port, "GET", "/status", token)
    else:
        answer = request(args.port, "POST", f"/{args.cmd}", token)
    print(json.dumps(answer), flush=True)
    return 1 if "error" in answer else 0


if __name__ == "__main__":
    sys.exit(main())
