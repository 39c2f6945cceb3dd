"""The shaper agent: one process on a machine the orchestrator cannot open handles on itself (a cluster
node), for the whole run, so that a shaping operation costs a line, not a process. Started once per
cluster node in its shaping daemon's pod (charts/peerlab-shaper: `python -m orchestrator.shaping
--serve`, exec'd by the run), it keeps one pyroute2 handle open per network namespace it was sent
(a pod's, by the file the daemon sees it at) and answers one JSON line for each JSON line it reads:

    {"ops": [...], "netns": PATH}    the operations of ops.to_wire, applied in order in that namespace
                                     (without "netns": the agent's own)              -> {"done": [...]}
    {"delayline_start": {"seed": 7}} start this node's one delay line (delayline.py), attached later
                                     to each pod's namespace by its own requests     -> {"ok": "started"}
    {"delayline": {"op": ...}}       a request for that delay line -> its answer, as it gave it
    anything that fails              -> {"error": "..."}; the agent goes on

It exits when stdin closes, closing the delay line's stdin first (which ends it) and every handle.
Every pod's tree, partitions, counters and the node's delay line travel over the one stream.

`ShaperAgent` is the orchestrator's side, over any channel that sends and receives lines: an exec
stream of the API server (kube_exec.ExecLines) or a local process's pipes (lines.PipeLines, e.g.
`docker exec -i`).
"""
from __future__ import annotations

import json
import sys
import threading
from typing import Any

from orchestrator.shaping import ops, realtime
from orchestrator.shaping.delayline import DelayLineProcess
from orchestrator.shaping.lines import Lines

ARGV = ["python3", "-m", "orchestrator.shaping", "--serve"]
TIMEOUT = 60  # seconds one request may take (the first waits for the agent's own start)


# in the node's namespace -----------------------------------------------------------------------
def serve(stdin: Any = None, stdout: Any = None) -> int:
    """Answer requests until stdin closes."""
    from pyroute2 import IPRoute, NetNS

    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    delayline: DelayLineProcess | None = None
    handles: dict[str, Any] = {}

    def handle(netns: str | None) -> Any:
        if netns is None:
            return ipr
        if netns not in handles:  # flags=0: an existing namespace, never a new one
            handles[netns] = NetNS(netns, flags=0)
        return handles[netns]

    with IPRoute() as ipr:
        try:
            for line in stdin:
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                    if "ops" in request:
                        answer: dict[str, Any] = {
                            "done": ops.apply(handle(request.get("netns")), ops.from_wire(request["ops"]))}
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
                delayline.close()
            for h in handles.values():
                h.close()
    return 0


def _start_delayline(running: DelayLineProcess | None, seed: int) -> DelayLineProcess:
    if running is not None:
        raise RuntimeError("the delay line is already running on this node")
    return DelayLineProcess(seed, preexec=realtime.preexec())


def _ask(delayline: DelayLineProcess | None, msg: dict[str, Any]) -> dict[str, Any]:
    if delayline is None:
        raise RuntimeError("no delay line here: send delayline_start first")
    return delayline.request(**msg)


# the orchestrator's side -----------------------------------------------------------------------
class ShaperAgent:
    """One cluster node's agent, one request at a time (callers in several threads take turns)."""

    def __init__(self, lines: Lines, where: str):
        self.lines = lines
        self.where = where
        self.lock = threading.Lock()

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.lines.send(json.dumps(msg))
            return json.loads(self.lines.receive(TIMEOUT))

    def apply(self, todo: list[ops.Op], netns: str | None = None, what: str = "") -> list[dict[str, Any]]:
        """The operations in the namespace at `netns` (as the agent sees it; `what` names it)."""
        answer = self.request({"ops": ops.to_wire(todo), **({"netns": netns} if netns else {})})
        if "error" in answer:
            raise RuntimeError(f"shaper in {self.where}{' for ' + what if what else ''} failed: {answer['error']}")
        return answer["done"]

    def close(self) -> None:
        self.lines.close()


class AgentDelayLine:
    """A cluster node's delay line, spoken to through that node's agent (the interface of
    delayline.DelayLineProcess: `request`, `close`); attached to each pod's namespace there."""

    def __init__(self, agent: ShaperAgent, seed: int):
        self.agent = agent
        answer = agent.request({"delayline_start": {"seed": seed}})
        if "error" in answer:
            raise RuntimeError(f"delay line in {agent.where}: {answer['error']}")

    def request(self, **msg: Any) -> dict[str, Any]:
        answer = self.agent.request({"delayline": msg})
        if "error" in answer:  # the agent's DelayLineProcess names the delay line and the operation
            raise RuntimeError(f"{answer['error']} (in {self.agent.where})")
        return answer

    def close(self) -> None:
        """It ends with its agent (whose stdin closes at teardown)."""
