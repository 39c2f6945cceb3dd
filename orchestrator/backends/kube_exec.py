"""Exec into a pod's container through the API server, the three ways the kubernetes backend needs:

    run(...)          one command to its end: exit code, stdout, stderr (`ExecResult`)
    ExecLines         one command kept open for the run, spoken to a line at a time (a cluster node's
                      shaper agent, orchestrator/shaping/agent.py): one websocket, no process on this host
    bridge(...)       one command with this process's stdin and stdout as its own, for code that wants
                      a local process (the calibration and clock probes):

    python -m orchestrator.backends.kube_exec --namespace NS [--context C] POD CONTAINER -- ARGV...

Each stream has an API client of its own: kubernetes.stream swaps the transport of the client it is
given while it connects, so on a shared one a REST call made meanwhile by another thread would go out
as a websocket.

May import: kube_config (the client's settings, for the bridge); never kube_cluster, which imports
this module.
"""
from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass
from typing import Any

from websocket import WebSocketException

from orchestrator.backends.kube_config import client_config

CONNECT_TIMEOUT = 30  # seconds for an exec stream's websocket handshake
TIMED_OUT = 124       # ExecResult.code: the command did not end in time
NO_STATUS = 125       # ExecResult.code: the stream closed without the command's exit status
STDERR_KEPT = 4000    # characters of a long-lived command's stderr kept for its error messages


@dataclass
class ExecResult:
    """What a command run in a container gave: exit code, standard output, standard error apart."""

    code: int
    stdout: str
    stderr: str


def open_stream(config: Any, namespace: str, pod: str, container: str, argv: list[str], stdin: bool) -> Any:
    """An exec stream, on an API client of its own. The handshake has no timeout of its own: one is
    kept here."""
    from kubernetes import client
    from kubernetes.stream import stream

    api = client.CoreV1Api(client.ApiClient(config))
    result: list[Any] = []

    def connect() -> None:
        try:
            result.append(stream(api.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                                 command=argv, stdin=stdin, stdout=True, stderr=True, tty=False,
                                 _preload_content=False))
        except Exception as err:  # noqa: BLE001 - raised in the caller's thread
            result.append(err)

    worker = threading.Thread(target=connect, daemon=True, name=f"exec-{pod}")
    worker.start()
    worker.join(CONNECT_TIMEOUT)
    if not result:
        raise RuntimeError(f"exec into pod {pod}: no answer from the API server in {CONNECT_TIMEOUT}s")
    if isinstance(result[0], Exception):
        raise RuntimeError(f"exec into pod {pod}: {result[0]}") from result[0]
    return result[0]


def returncode(resp: Any) -> int | None:
    """The command's exit code from a closed stream; None if it closed without a status message."""
    try:
        return resp.returncode
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def run(resp: Any, stdin: str | None, timeout: float) -> ExecResult:
    """Feed `stdin` to an open stream and wait at most `timeout` seconds for its command to end."""
    try:
        if stdin is not None:
            resp.write_stdin(stdin)
        resp.run_forever(timeout=timeout)  # buffers stdout and stderr until the command ends
        out, err = resp.read_stdout(timeout=0) or "", resp.read_stderr(timeout=0) or ""
        if resp.is_open():
            return ExecResult(TIMED_OUT, out, err + f"\n(did not end within {timeout:.0f}s)")
        code = returncode(resp)
        if code is None:
            return ExecResult(NO_STATUS, out, err + "\n(the exec stream closed without an exit status)")
        return ExecResult(code, out, err)
    finally:
        resp.close()


class ExecLines:
    """A command in a pod spoken to a line at a time: `send` a line, `receive` the next one it prints.
    What it prints on stderr is kept (its last STDERR_KEPT characters) for the message when it ends."""

    def __init__(self, resp: Any, pod: str):
        self.resp = resp
        self.pod = pod
        self.stderr = ""

    def send(self, line: str) -> None:
        try:
            self.resp.write_stdin(line + "\n")
        except (OSError, WebSocketException) as err:
            raise RuntimeError(f"exec stream into pod {self.pod} closed ({err.__class__.__name__}){self._why()}") from None

    def receive(self, timeout: float) -> str:
        """The next line, or a RuntimeError if none came within `timeout` seconds or the stream closed."""
        try:
            line = self.resp.readline_stdout(timeout=timeout)
        except (OSError, ValueError, TypeError, WebSocketException):
            line = None  # the socket closed under the read
        if self.resp.peek_stderr():
            self.stderr = (self.stderr + self.resp.read_stderr())[-STDERR_KEPT:]
        if line is None:
            state = "closed" if not self.resp.is_open() else f"gave no line in {timeout:.0f} s"
            raise RuntimeError(f"exec stream into pod {self.pod} {state}{self._why()}")
        return line

    def _why(self) -> str:
        return f": {self.stderr.strip()[-500:]}" if self.stderr.strip() else ""

    def close(self) -> None:
        """Closing the stream closes the command's stdin (it ends there)."""
        try:
            self.resp.close()
        except (OSError, WebSocketException):
            pass


def bridge(resp: Any, pod: str) -> int:
    """Run an open stream's command with this process's stdin and stdout as its own, until it ends or
    this stdin does (closing the stream closes the command's stdin); its exit code."""
    stdin_ended = threading.Event()

    def pump() -> None:
        for line in sys.stdin:
            resp.write_stdin(line)
        stdin_ended.set()
        resp.close()

    threading.Thread(target=pump, daemon=True).start()
    try:
        while resp.is_open():
            resp.update(timeout=1)
            if resp.peek_stdout():
                sys.stdout.write(resp.read_stdout())
                sys.stdout.flush()
            if resp.peek_stderr():
                sys.stderr.write(resp.read_stderr())
                sys.stderr.flush()
    except (OSError, ValueError, TypeError, WebSocketException):
        # the stream closed under update(): by `pump` (our stdin ended: the normal end), or by the
        # other side, which the client library reports as whichever error its socket gives
        if stdin_ended.is_set():
            return 0
        print(f"exec stream into pod {pod} closed by the API server", file=sys.stderr)
        return NO_STATUS
    code = returncode(resp)
    if code is None:
        print(f"exec stream into pod {pod} closed without the command's exit status", file=sys.stderr)
        return NO_STATUS
    return code or 0


def command(namespace: str, context: str | None, pod: str, container: str) -> list[str]:
    """The command of a local process whose stdin and stdout are those of ARGV in the pod (append it)."""
    return [sys.executable, "-m", "orchestrator.backends.kube_exec", "--namespace", namespace,
            *(["--context", context] if context else []), pod, container, "--"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.backends.kube_exec",
                                     description="Run a command in a pod's container, with this process's "
                                                 "stdin and stdout as its own (the orchestrator's bridge)")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--context")
    parser.add_argument("pod")
    parser.add_argument("container")
    parser.add_argument("argv", nargs="+", help="after --: the command")
    args = parser.parse_args(argv)
    config = client_config(args.context)
    return bridge(open_stream(config, args.namespace, args.pod, args.container, args.argv, stdin=True), args.pod)

if __name__ == "__main__":
    sys.exit(main())
