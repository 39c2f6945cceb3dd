"""How a shaper's typed operations (ops.py) reach the network namespace they are for. The backend the
nodes run on hands its run one `NamespaceAccess` (`Backend.namespaces`), built from what only it knows
(where each namespace is, how a command runs in a container, which daemon serves a pod); the shaper
(mechanisms.py) gives it a deploy's or a fault's work, and the work goes from there to tc.py without
leaving shaping/. It also says what enters a namespace from outside needs: the namespace's file as
the delay line serving it sees it (`file_of`), a Python started in it (`python_in`, the calibration
probes), and where a machine has a delay line of its own, that line (`delay_line_of`):

    InProcess       a netlink handle per namespace, opened once and kept for the run (local: the
                    nodes' namespaces and the switch's are this machine's)
    InContainers    shaping's own entry point (`python -m orchestrator.shaping --ops`) exec'd in a
                    node's sandbox container by the engine; the host's namespace in process (docker)
    ThroughDaemons  the shaping daemon of each cluster node (agent.py), one request per cluster node
                    for all its pods' work (kubernetes)

May import: orchestrator.shaping's ops, tc and agent; pyroute2. Never backends/."""
from __future__ import annotations

import abc
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, TypeVar

from pyroute2 import IPRoute, NetlinkError, NetNS

from orchestrator.shaping import ops, tc
from orchestrator.shaping.agent import AgentDelayLine, ShaperAgent

T = TypeVar("T")
Work = dict[str, list[ops.Op]]  # namespace -> the operations done in it, in order
Done = list[dict[str, Any]]     # what each operation answered, in order
# how a backend runs a call per item: in turn, or side by side where each is a round trip (Backend.each)
Each = Callable[[Callable[[Any], Any], Iterable[Any]], list[Any]]


def in_turn(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    return [fn(item) for item in items]


class NamespaceAccess(abc.ABC):
    """Runs operations in a namespace, named as the backend's `link_ends` names it."""

    per_machine = False  # one delay line per machine the namespaces are on (`delay_line_of`), not one here

    def __init__(self, each: Each = in_turn):
        self.each = each

    def file_of(self, where: str) -> str:
        """The namespace's file, as the delay line that serves it (and a command entering it) sees it."""
        # (a refusal, not a stub: an access whose namespaces nothing enters from outside has no file)
        raise NotImplementedError(f"namespace {where}: this run's namespace access gives no file for the "
                                  "delay line or the probes to enter (its backend has neither)")

    def python_in(self, where: str) -> list[str]:
        """The command of a Python, started from here, that runs in the namespace with peerlab
        importable (the calibration probes): nsenter on this machine."""
        return ["nsenter", f"--net={self.file_of(where)}", sys.executable]

    def delay_line_of(self, where: str, seed: int) -> Any:
        """Where `per_machine`: the delay line of the machine the namespace is on (one object for all
        the namespaces there), with `request` and `close` (delayline.DelayLineProcess's)."""
        # (a refusal, not a stub: the shaper asks only where `per_machine`)
        raise NotImplementedError(f"namespace {where}: one delay line for every namespace, here, not one per machine")

    @abc.abstractmethod
    def run(self, where: str, todo: list[ops.Op]) -> Done:
        """The operations, in order, in namespace `where`; what each answered."""

    def run_all(self, work: Work, check_stop: Callable[[], None]) -> None:
        """Every namespace's operations, stopping between two if the run is being stopped."""
        def run(item: tuple[str, list[ops.Op]]) -> None:
            check_stop()
            self.run(*item)
        self.each(run, work.items())

    def close(self) -> None:
        """Before the namespaces are removed: let go of what is held in them."""


class NamespaceHandle:
    """A netlink handle in one network namespace, opened once and used from a thread of its own.

    Opening a handle in a namespace forks this process (pyroute2 enters the namespace in a child,
    which passes the socket back), and pyroute2's handles keep per-thread state, hence the one thread.
    The switch's handle is used every second (the link counters) and by every partition, heal and
    rate change: opened each time, that was a fork of the orchestrator per second and per fault."""

    def __init__(self, name: str):
        self.name = name
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"netns-{name}")
        self._handle: NetNS | None = None
        self._closed = False

    def call(self, fn: Callable[[NetNS], T]) -> T:
        def run() -> T:
            if self._closed:  # (a call queued behind the close must not open it again)
                raise RuntimeError(f"namespace {self.name} is being removed")
            if self._handle is None:
                self._handle = NetNS(self.name, flags=0)
            try:
                return fn(self._handle)
            except NetlinkError:
                raise  # the kernel refused the operation: the socket itself is fine
            except Exception:
                self._drop()  # a broken socket: the next call opens a new one
                raise
        return self._thread.submit(run).result()

    def _drop(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def close(self) -> None:
        """Before the namespace is removed: an open socket would keep it, and its links, alive."""
        def run() -> None:
            self._closed = True
            self._drop()
        try:
            if not self._closed:
                self._thread.submit(run).result()
        finally:
            self._thread.shutdown()


class InProcess(NamespaceAccess):
    """Named namespaces of this machine, each through its one handle, kept for the run, so that a live
    change forks nothing (twenty degrades at once under load took 1.55 s with a handle opened each)."""

    def __init__(self) -> None:
        super().__init__()
        self._handles: dict[str, NamespaceHandle] = {}
        self._lock = threading.Lock()
        self._closed = False

    def handle(self, name: str) -> NamespaceHandle:
        """The namespace's handle (opened at its first call), for what else the backend reads there.
        Once closed, none: a call still in flight at teardown (a link counters' sample) must not open
        a namespace again just before it is removed."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"namespace {name} is being removed")
            return self._handles.get(name) or self._handles.setdefault(name, NamespaceHandle(name))

    def run(self, where: str, todo: list[ops.Op]) -> Done:
        return self.handle(where).call(lambda ns: tc.apply(ns, todo))

    def file_of(self, where: str) -> str:
        return f"/var/run/netns/{where}"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            handles, self._handles = list(self._handles.values()), {}
        for handle in handles:
            handle.close()


class InContainers(NamespaceAccess):
    """`exec_in(container, argv)` -> (exit code, output): how the engine runs a command as root in a
    container; `host`: the name that means this machine's own namespace (the bridge's side);
    `pid_of(container)`: its first process as this machine sees it (the namespace is this kernel's)."""

    def __init__(self, exec_in: Callable[[str, list[str]], tuple[int, bytes]], host: str,
                 pid_of: Callable[[str], int], each: Each):
        super().__init__(each)
        self.exec_in = exec_in
        self.host = host
        self.pid_of = pid_of

    def file_of(self, where: str) -> str:
        return f"/proc/{self.pid_of(where)}/ns/net"

    def run(self, where: str, todo: list[ops.Op]) -> Done:
        if where == self.host:
            with IPRoute() as ipr:
                return tc.apply(ipr, todo)
        code, output = self.exec_in(where, ["python", "-m", "orchestrator.shaping", "--ops",
                                            json.dumps(ops.to_wire(todo))])
        out = output.decode(errors="replace").strip()
        try:
            done = json.loads(out.splitlines()[-1])
        except (ValueError, IndexError):
            done = {"error": out[-2000:]}
        if code != 0 or isinstance(done, dict):
            raise RuntimeError(f"shaper in {where} failed: {done.get('error') if isinstance(done, dict) else out}")
        return done


class ThroughDaemons(NamespaceAccess):
    """A pod's namespace through the agent of its cluster node's shaping daemon: `daemon_of(pod)` names
    that cluster node, `agents` holds their agents (as they open), `netns_of(pod)` is the pod's namespace
    file as its daemon sees it, `python_on(cluster node, file)` the command of a Python that the daemon
    there starts in that namespace. Each cluster node has its delay line, started by its daemon."""

    per_machine = True

    def __init__(self, agents: dict[str, ShaperAgent], daemon_of: Callable[[str], str],
                 netns_of: Callable[[str], str], python_on: Callable[[str, str], list[str]], each: Each):
        super().__init__(each)
        self.agents = agents
        self.daemon_of = daemon_of
        self.netns_of = netns_of
        self.python_on = python_on
        self.lines: dict[str, AgentDelayLine] = {}  # cluster node -> its delay line

    def run(self, where: str, todo: list[ops.Op]) -> Done:
        return self.agents[self.daemon_of(where)].apply(todo, self.netns_of(where), f"pod {where}")

    def file_of(self, where: str) -> str:
        return self.netns_of(where)

    def python_in(self, where: str) -> list[str]:
        return self.python_on(self.daemon_of(where), self.netns_of(where))

    def delay_line_of(self, where: str, seed: int) -> AgentDelayLine:
        """The delay line of the pod's cluster node, started by its daemon at the first pod there."""
        machine = self.daemon_of(where)
        if machine not in self.lines:
            self.lines[machine] = AgentDelayLine(self.agents[machine], seed + len(self.lines))
        return self.lines[machine]

    def close(self) -> None:
        self.lines.clear()  # each ends with its daemon's agent, which the backend closes

    def run_all(self, work: Work, check_stop: Callable[[], None]) -> None:
        """One request per cluster node for all its pods' operations (a partition of 30 pods on 3 nodes:
        3 round trips, side by side), stopping between nodes if the run is being stopped."""
        by_daemon: dict[str, list[tuple[str | None, list[ops.Op], str]]] = {}
        for pod, todo in work.items():
            by_daemon.setdefault(self.daemon_of(pod), []).append((self.netns_of(pod), todo, f"pod {pod}"))

        def run(item: tuple[str, list[tuple[str | None, list[ops.Op], str]]]) -> None:
            check_stop()
            self.agents[item[0]].apply_batch(item[1])
        self.each(run, by_daemon.items())
