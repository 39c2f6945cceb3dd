"""A process spoken to a line at a time: what the shaper agent's channels (an exec stream, a local
process's pipes) and the delay line's process have in common."""
from __future__ import annotations

import subprocess
from typing import Callable, Protocol


class Lines(Protocol):
    def send(self, line: str) -> None: ...
    def receive(self, timeout: float) -> str: ...
    def close(self) -> None: ...


class PipeLines:
    """A local process spoken to a line at a time (its stderr passes through to ours)."""

    def __init__(self, argv: list[str], preexec: Callable[[], None] | None = None):
        """`preexec`: run in the child before its program (realtime.preexec: the cgroup it runs in)."""
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=preexec)

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
