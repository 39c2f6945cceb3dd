"""The node supervisor: the main process of a node's container where the orchestrator does not own
the container's life (a Kubernetes pod). It holds the node process and starts, kills and reports it
on request, so that a node can be down for a while, crash with SIGKILL and come back with the same
identity while its pod (network namespace, address, tc tree) stays as it is.

    python -m node.supervisor serve --dir D            the container's command: wait for requests
    python -m node.supervisor start --dir D < CONFIG   start the node with this config (one JSON line)
    python -m node.supervisor stop --dir D             SIGTERM the node (it stops its own way)
    python -m node.supervisor kill --dir D             SIGKILL the node; answers once it is gone
    python -m node.supervisor wait --dir D [--timeout S]   until the node exits (or S seconds pass)
    python -m node.supervisor status --dir D           {"running", "pid", "starts", "exit_code"}

The requests reach `serve` over the Unix socket D/supervisor.sock (the orchestrator runs them
through the exec API); each answer is one JSON line on stdout. The node's own output goes to the
container's output. SIGTERM (pod deletion) is passed on to the node.

The node is peerlab's own (`python -m node --config FILE`) unless PEERLAB_NODE_COMMAND holds another
command as a JSON list, with `{config}` where the config file's path goes: the chart sets it for the
pods of an adapter's node group (node/adapters), whose images carry this module beside the adapter.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

SOCKET = "supervisor.sock"
COMMAND_ENV = "PEERLAB_NODE_COMMAND"


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
    def __init__(self, directory: Path):
        self.dir = directory
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.exit_code: int | None = None

    def status(self) -> dict[str, Any]:
        running = self.proc is not None and self.proc.returncode is None
        return {"running": running, "pid": self.proc.pid if running and self.proc else None,
                "starts": self.starts, "exit_code": self.exit_code}

    async def start(self, config: dict[str, Any]) -> dict[str, Any]:
        if self.status()["running"]:
            return {"error": "the node is running; kill it or wait for it first"}
        path = self.dir / "config.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(config))
        tmp.replace(path)
        self.proc = await asyncio.create_subprocess_exec(*node_command(str(path)))
        self.starts += 1
        self.exit_code = None
        asyncio.create_task(self._reap(self.proc))
        return self.status()

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if proc is self.proc:
            self.exit_code = code

    async def wait(self, timeout: float) -> dict[str, Any]:
        if self.proc is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)
            except asyncio.TimeoutError:
                pass
            await asyncio.sleep(0)  # let _reap record the code
        return self.status()

    async def stop(self) -> dict[str, Any]:
        """SIGTERM; answers at once (`wait` follows the node down)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
        return self.status()

    async def kill(self) -> dict[str, Any]:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
            await asyncio.sleep(0)
        return self.status()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = json.loads(await reader.readline())
            cmd = request.get("cmd")
            if cmd == "start":
                answer = await self.start(request["config"])
            elif cmd == "stop":
                answer = await self.stop()
            elif cmd == "kill":
                answer = await self.kill()
            elif cmd == "wait":
                answer = await self.wait(float(request.get("timeout", 10)))
            elif cmd == "status":
                answer = self.status()
            else:
                answer = {"error": f"unknown request {cmd!r}"}
        except (ValueError, KeyError, OSError) as err:
            answer = {"error": f"{err.__class__.__name__}: {err}"}
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
        writer.close()

    async def serve(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        sock = self.dir / SOCKET
        sock.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self.handle, path=str(sock))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"supervisor: waiting for requests on {sock}", flush=True)
        async with server:
            await stop.wait()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 8)
            except asyncio.TimeoutError:
                self.proc.kill()
        sock.unlink(missing_ok=True)


async def request(directory: Path, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(directory / SOCKET)), 5)
    writer.write(json.dumps(body).encode() + b"\n")
    await writer.drain()
    answer = json.loads(await asyncio.wait_for(reader.readline(), timeout))
    writer.close()
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.supervisor", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", choices=["serve", "start", "stop", "kill", "wait", "status"])
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("PEERLAB_SUPERVISOR_DIR", "/run/peerlab")),
                        help="the supervisor's directory (its socket and the node's config)")
    parser.add_argument("--timeout", type=float, default=10.0, help="wait: seconds to wait for the node to exit")
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        asyncio.run(Supervisor(args.dir).serve())
        return 0
    body: dict[str, Any] = {"cmd": args.cmd}
    if args.cmd == "start":
        line = sys.stdin.readline()  # one line: the exec API cannot always signal the end of stdin
        body["config"] = json.loads(line)
    if args.cmd == "wait":
        body["timeout"] = args.timeout
    try:
        answer = asyncio.run(request(args.dir, body, args.timeout + 15))
    except (OSError, asyncio.TimeoutError) as err:
        answer = {"error": f"no supervisor answers on {args.dir / SOCKET}: {err.__class__.__name__} {err}"}
    print(json.dumps(answer), flush=True)
    return 1 if "error" in answer else 0


if __name__ == "__main__":
    sys.exit(main())
