"""The shaper agent: one process in a node's namespace for the whole run, where the orchestrator cannot
open a handle itself (a pod on another machine), so that a shaping operation costs a line, not a
process. Started once per pod in its shaper sidecar (`python -m orchestrator.shaping --serve`), it
keeps one pyroute2 handle open and answers one JSON line for each JSON line it reads:

    {"ops": [...]}                   the operations of ops.to_wire, applied in order -> {"done": [...]}
    {"delayline_start": {"seed": 7}} start the delay line here (delayline.py), attached later by its
                                     own requests                                    -> {"ok": "started"}
    {"delayline": {"op": ...}}       a request for that delay line -> its answer, as it gave it
    anything that fails              -> {"error": "..."}; the agent goes on

It exits when stdin closes, closing the delay line's stdin first (which ends it). The partition of a
pod, its counters and its delay line all travel over the one stream that started it.

`ShaperAgent` is the orchestrator's side, over any channel that sends and receives lines: an exec
stream of the API server (kube_exec.ExecLines) or a local process's pipes (`PipeLines`, e.g.
`docker exec -i`).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any, Protocol

from orchestrator.shaping import native_build, ops

ARGV = ["python3", "-m", "orchestrator.shaping", "--serve"]
TIMEOUT = 60  # seconds one request may take (the first waits for the agent's own start)


# in the node's namespace -----------------------------------------------------------------------
def serve(stdin: Any = None, stdout: Any = None) -> int:
    """Answer requests until stdin closes."""
    from pyroute2 import IPRoute

    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    delayline: subprocess.Popen | None = None
    with IPRoute() as ipr:
        try:
            for line in stdin:
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                    if "ops" in request:
                        answer: dict[str, Any] = {"done": ops.apply(ipr, ops.from_wire(request["ops"]))}
                    elif "delayline_start" in request:
                        delayline = _start_delayline(delayline, int(request["delayline_start"]["seed"]))
                        answer = {"ok": "started"}
                    elif "delayline" in request:
                        answer = _ask(delayline, request["delayline"])
                    else:
                        raise ValueError(f"unknown request {sorted(request)}")
                except Exception as err:  # noqa: BLE001 - the caller shows this line, and the agent goes on
                    answer = {"error": f"{err.__class__.__name__}: {err}"}
                stdout.write(json.dumps(answer) + "\n")
                stdout.flush()
        finally:
            if delayline is not None:
                delayline.stdin.close()  # EOF: it exits
                delayline.wait(10)
    return 0


def _start_delayline(running: subprocess.Popen | None, seed: int) -> subprocess.Popen:
    if running is not None:
        raise RuntimeError("the delay line is already running in this namespace")
    return subprocess.Popen([str(native_build.path()), "--seed", str(seed)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)


def _ask(delayline: subprocess.Popen | None, msg: dict[str, Any]) -> dict[str, Any]:
    if delayline is None:
        raise RuntimeError("no delay line here: send delayline_start first")
    if delayline.poll() is not None:
        raise RuntimeError(f"the delay line exited (code {delayline.returncode}); packets are not delayed")
    delayline.stdin.write(json.dumps(msg) + "\n")
    delayline.stdin.flush()
    return json.loads(delayline.stdout.readline() or '{"error": "the delay line gave no answer"}')


# the orchestrator's side -----------------------------------------------------------------------
class Lines(Protocol):
    def send(self, line: str) -> None: ...
    def receive(self, timeout: float) -> str: ...
    def close(self) -> None: ...


class PipeLines:
    """A local process spoken to a line at a time (its stderr passes through to ours)."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise RuntimeError(f"{self.argv[0]} ... ended (code {self.proc.poll()})") from None

    def receive(self, timeout: float) -> str:
        line = self.proc.stdout.readline()  # a pipe has no timeout; the process ending ends the wait
        if not line:
            raise RuntimeError(f"{self.argv[0]} ... ended (code {self.proc.wait()}) without an answer")
        return line.rstrip("\n")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ShaperAgent:
    """One node's agent, one request at a time (callers in several threads take turns)."""

    def __init__(self, lines: Lines, where: str):
        self.lines = lines
        self.where = where
        self.lock = threading.Lock()

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.lines.send(json.dumps(msg))
            return json.loads(self.lines.receive(TIMEOUT))

    def apply(self, todo: list[ops.Op]) -> list[dict[str, Any]]:
        answer = self.request({"ops": ops.to_wire(todo)})
        if "error" in answer:
            raise RuntimeError(f"shaper in {self.where} failed: {answer['error']}")
        return answer["done"]

    def close(self) -> None:
        self.lines.close()


class AgentDelayLine:
    """The delay line inside a node's namespace, spoken to through that node's agent (the interface of
    delayline.DelayLineProcess: `request`, `close`)."""

    def __init__(self, agent: ShaperAgent, seed: int):
        self.agent = agent
        answer = agent.request({"delayline_start": {"seed": seed}})
        if "error" in answer:
            raise RuntimeError(f"delay line in {agent.where}: {answer['error']}")

    def request(self, **msg: Any) -> dict[str, Any]:
        answer = self.agent.request({"delayline": msg})
        if "error" in answer:
            raise RuntimeError(f"delay line in {self.agent.where}, {msg['op']}: {answer['error']}")
        return answer

    def close(self) -> None:
        """It ends with its agent (whose stdin closes at teardown)."""
