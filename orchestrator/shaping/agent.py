"""The shaper agent: one process on a machine the orchestrator cannot open handles on itself (a cluster
node), for the whole run, so that a shaping operation costs a line, not a process. Started once per
cluster node in its shaping daemon's pod (charts/peerlab-shaper: `python -m orchestrator.shaping
--serve`, exec'd by the run), it keeps one pyroute2 handle open per network namespace it was sent
(a pod's, by the file the daemon sees it at) and answers one JSON line for each JSON line it reads:

    {"ops": [...], "netns": PATH}    the operations of ops.to_wire, applied in order in that namespace
                                     (without "netns": the agent's own)              -> {"done": [...]}
    {"batch": [{"ops": ..., "netns": ...}, ...]}   several namespaces' operations, in order: one round
                                     trip for a cluster node's pods (a partition)    -> {"done": [[...], ...]}
    {"version": true}                the hash of its shaping code (`code_version`)   -> {"version": "..."}
    {"pods_netns": {"namespace": NS, "pods": [...]}}   those pods' network namespace files, found
                                     through this node's CRI (cri.py)  -> {"netns": {"POD": PATH, ...}}
    {"delayline_start": {"seed": 7}} start this node's one delay line (delayline.py), attached later
                                     to each pod's namespace by its own requests     -> {"ok": "started"}
    {"delayline": {"op": ...}}       a request for that delay line -> its answer, as it gave it
    anything that fails              -> {"error": "..."}; the agent goes on

A request's "id", if any, comes back in its answer, so that the orchestrator's side never takes a late
answer for another request's. It exits when stdin closes, or after IDLE_S without a request (a run's
orchestrator asks for counters every few seconds: one whose connection died without closing must not
leave a real-time delay line behind for hours), closing the delay line's stdin first (which ends it)
and every handle. Every pod's tree, partitions, counters and the node's delay line travel over the one
stream.

`ShaperAgent` is the orchestrator's side, over any channel that sends and receives lines: an exec
stream of the API server (kube_exec.ExecLines) or a local process's pipes (line_channel.PipeLines, e.g.
`docker exec -i`).
"""
from __future__ import annotations

import hashlib
import json
import select
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.shaping import cri, ops, realtime, tc
from orchestrator.shaping.delayline import DelayLineProcess
from orchestrator.shaping.line_channel import Lines

ARGV = ["python3", "-m", "orchestrator.shaping", "--serve"]
TIMEOUT = 60  # seconds one request may take (the first waits for the agent's own start)
IDLE_S = 900  # the agent ends after this long without a request


def python_in(netns: str) -> list[str]:
    """What the daemon runs to start a Python in a pod's network namespace for the orchestrator's probes
    (calibration, clocks): entered as root, then as nobody, without any capability: a probe server
    listening on the pod's address is no door into a privileged daemon."""
    return ["nsenter", f"--net={netns}", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "python3"]


def code_version() -> str:
    """A hash of this package's Python sources: the daemon's agent and the orchestrator compare theirs."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _lines(stdin: Any, idle_s: float):
    """stdin's lines, until it closes or stays silent for idle_s (a stream without a file: no wait)."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    while True:
        if fd is not None and not select.select([fd], [], [], idle_s)[0]:
            print(f"shaper agent: no request for {idle_s:.0f} s: ending", file=sys.stderr, flush=True)
            return
        line = stdin.readline()
        if not line:
            return
        yield line


# on the cluster node ---------------------------------------------------------------------------
def serve(stdin: Any = None, stdout: Any = None, idle_s: float = IDLE_S) -> int:
    """Answer requests until stdin closes or stays silent for idle_s."""
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

    def applied(item: dict[str, Any]) -> list[dict[str, Any]]:
        return tc.apply(handle(item.get("netns")), ops.from_wire(item["ops"]), item.get("netns"))

    with IPRoute() as ipr:
        try:
            for line in _lines(stdin, idle_s):
                if not line.strip():
                    continue
                request: dict[str, Any] = {}
                try:
                    request = json.loads(line)
                    if "ops" in request:
                        answer: dict[str, Any] = {"done": applied(request)}
                    elif "batch" in request:
                        answer = {"done": []}
                        for i, item in enumerate(request["batch"]):
                            try:
                                answer["done"].append(applied(item))
                            except Exception as err:  # noqa: BLE001 - named by its place in the batch; the rest not done
                                answer = {"error": f"{err.__class__.__name__}: {err}", "item": i}
                                break
                    elif "version" in request:
                        answer = {"version": code_version()}
                    elif "pods_netns" in request:
                        asked = request["pods_netns"]
                        answer = {"netns": cri.netns_of(str(asked["namespace"]), [str(p) for p in asked["pods"]])}
                    elif "delayline_start" in request:
                        delayline = _start_delayline(delayline, int(request["delayline_start"]["seed"]))
                        answer = {"ok": "started"}
                    elif "delayline" in request:
                        answer = _ask(delayline, request["delayline"])
                    else:
                        raise ValueError(f"unknown request {sorted(request)}")
                except Exception as err:  # noqa: BLE001 - the caller shows this line, and the agent goes on
                    answer = {"error": f"{err.__class__.__name__}: {err}"}
                if isinstance(request, dict) and "id" in request:
                    answer["id"] = request["id"]
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
    return delayline.request(ops.line_op(msg))


# the orchestrator's side -----------------------------------------------------------------------
class ShaperAgent:
    """One cluster node's agent, one request at a time (callers in several threads take turns)."""

    def __init__(self, lines: Lines, where: str):
        self.lines = lines
        self.where = where
        self.lock = threading.Lock()
        self.sent = 0

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Its answer; one that came too late for an earlier request is passed over."""
        with self.lock:
            self.sent += 1
            self.lines.send(json.dumps({**msg, "id": self.sent}))
            while True:
                answer = json.loads(self.lines.receive(TIMEOUT))
                if answer.pop("id", self.sent) == self.sent:
                    return answer

    def check_version(self) -> None:
        """The agent runs the same shaping code as this orchestrator, or a RuntimeError says so."""
        theirs = self.request({"version": True}).get("version")
        if theirs != code_version():
            raise RuntimeError(f"the shaper agent in {self.where} runs other shaping code ({theirs}) than this "
                               f"peerlab ({code_version()}): update the shaping daemon (peerlab cluster up does; "
                               "docs/backends.md#the-shaping-daemon)")

    def pods_netns(self, namespace: str, pods: list[str]) -> dict[str, str]:
        """The pods' network namespace files on this agent's cluster node (through its CRI)."""
        answer = self.request({"pods_netns": {"namespace": namespace, "pods": pods}})
        if "error" in answer:
            raise RuntimeError(f"the shaping daemon in {self.where} could not find the pods' namespaces: "
                               f"{answer['error']}")
        return answer["netns"]

    def apply(self, todo: list[ops.Op], netns: str | None = None, what: str = "") -> list[dict[str, Any]]:
        """The operations in the namespace at `netns` (as the agent sees it; `what` names it)."""
        answer = self.request({"ops": ops.to_wire(todo), **({"netns": netns} if netns else {})})
        if "error" in answer:
            raise RuntimeError(f"shaper in {self.where}{' for ' + what if what else ''} failed: {answer['error']}")
        return answer["done"]

    def apply_batch(self, work: list[tuple[str | None, list[ops.Op], str]]) -> list[list[dict[str, Any]]]:
        """Several namespaces' operations (netns, operations, what names it) in one round trip, in
        order; the first that fails stops the rest and is named."""
        answer = self.request({"batch": [{"ops": ops.to_wire(todo), **({"netns": n} if n else {})}
                                         for n, todo, _ in work]})
        if "error" in answer:
            what = work[answer["item"]][2] if isinstance(answer.get("item"), int) else ""
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

    def request(self, op: ops.LineOp) -> dict[str, Any]:
        answer = self.agent.request({"delayline": ops.wire(op)})
        if "error" in answer:  # the agent's DelayLineProcess names the delay line and the operation
            raise RuntimeError(f"{answer['error']} (in {self.agent.where})")
        return answer

    def close(self) -> None:
        """It ends with its agent (whose stdin closes at teardown)."""
