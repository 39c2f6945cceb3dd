"""The delay line: per-pair latency for kernels without sch_netem, applied outside every node.

Where netem is missing no qdisc here can hold a packet back (no fq, etf or sfq either), so the
delay is applied in user space through netfilter's NFQUEUE. In each node's network namespace one
rule sends every IPv4 packet that arrives on its interface to a queue:

    iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0

and this process holds each packet, by its source address, for the one-way latency of the pair
(plus jitter that never reorders one direction, and the fault timeline's degradations), then
accepts it. Packets are taken at the receiver because there the kernel has already released them
from the sender's socket: held at the sender they would count against TCP small queues and cap a
connection at a few packets per round trip (netem avoids that by orphaning what it delays). The
queue is bound without fail-open: if this process dies, the run's packets stop instead of flowing
without their latency. GSO packets are queued whole, so a bulk transfer costs few verdicts.

Every node of a run, whoever wrote it, is delayed by this one mechanism, and the calibration
measures it like netem. One process serves all the namespaces of a run (`DelayLines`), or, where the
namespaces are on other machines (kubernetes pods), one runs inside each node's namespace and
attaches to its own (OWN_NETNS). It reads JSON lines on stdin and answers each with one JSON line
on stdout:

    {"op": "attach", "netns": "/var/run/netns/plab-n3", "ifname": "eth0", "node": "n3",
     "delays_ms": {"10.1.0.5": 40.0, ...}}                  -> {"ok": "n3"}
    {"op": "links", "ips": {"n3": "10.1.0.5", ...}, "jitter_ms": 2, "loss": 0.0}
    {"op": "degrade", "node": "n3", "delay_ms": 100, "loss": 0.1}  (zeros restore)
    {"op": "stats"} -> {"ok": "stats", "packets": {...}, "dropped": {...}}

It exits when stdin closes. `python -m orchestrator.shaping.delayline --probe` says whether NFQUEUE
works here (exit 0) or why not.
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from node.linkmodel import Degradations, release_time

QUEUE = 0
QUEUE_MAXLEN = 65536      # packets held at once per namespace (a verdict frees a slot)
REALTIME_PRIORITY = 10
LATE_EDGES_MS = (0.1, 0.5, 1, 2, 5, 10, 20)
LATE_WARN = 0.01          # share of packets released 10 ms or more late above which a run warns
COPY_BYTES = 20           # the IPv4 header: the source address is all we read
OWN_NETNS = "/proc/self/ns/net"  # attach: the namespace the delay line itself runs in


def rule(ifname: str, action: str = "-A") -> list[str]:
    return ["iptables", "-w", "-t", "mangle", action, "PREROUTING", "-i", ifname, "-j", "NFQUEUE",
            "--queue-num", str(QUEUE)]


class DelayLine:
    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.lock = threading.Condition()
        self.heap: list[tuple[float, int, Any]] = []
        self.order = itertools.count()
        self.delays: dict[str, dict[str, float]] = {}   # node -> source ip -> one-way delay, s
        self.last: dict[tuple[str, str], float] = {}    # (node, source ip) -> last release (no reordering)
        self.node_of_ip: dict[str, str] = {}
        self.jitter = 0.0
        self.loss = 0.0
        self.degraded = Degradations()
        self.packets: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.errors: list[str] = []
        self.late = [0] * 8  # releases by lateness: <0.1, <0.5, <1, <2, <5, <10, <20, >=20 ms after due
        threading.Thread(target=self._release, daemon=True, name="release").start()

    def attach(self, netns_name: str, ifname: str, node: str, delays_ms: dict[str, float]) -> None:
        """Bind a queue in the namespace, then add the rule that feeds it (nothing passes unqueued)."""
        self.delays[node] = {ip: ms / 1000 for ip, ms in delays_ms.items()}
        self.packets[node] = self.dropped[node] = 0
        ready: list[BaseException | None] = []
        done = threading.Event()
        threading.Thread(target=self._serve, args=(netns_name, ifname, node, ready, done), daemon=True,
                         name=f"queue-{node}").start()
        done.wait(30)
        if not ready or ready[0] is not None:
            raise RuntimeError(f"delay line for {node}: {ready[0] if ready else 'no answer'}")

    def _serve(self, netns_name: str, ifname: str, node: str, ready: list, done: threading.Event) -> None:
        import fnfqueue
        from pyroute2 import netns

        try:
            if netns_name != OWN_NETNS:  # setns needs CAP_SYS_ADMIN, which a pod's shaper does not have
                netns.setns(netns_name, flags=0, fork=False)  # this thread only: the socket lives there
            conn = fnfqueue.Connection(alloc_size=64, chunk_size=32, packet_size=512)
            queue = conn.bind(QUEUE)
            queue.set_mode(COPY_BYTES, fnfqueue.COPY_PACKET)
            queue.set_maxlen(QUEUE_MAXLEN)
            queue.gso = True
            # the child inherits this thread's namespace
            subprocess.run(rule(ifname), check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as err:
            detail = getattr(err, "stderr", "") or ""
            ready.append(RuntimeError(f"{err} {detail}".strip()))
            done.set()
            return
        ready.append(None)
        done.set()
        delays = self.delays[node]
        try:
            for packet in conn:
                src = socket.inet_ntoa(packet.payload[12:16])
                now = time.monotonic()
                with self.lock:
                    self.packets[node] += 1
                    peer = self.node_of_ip.get(src)
                    loss = self.degraded.loss(node, peer, self.loss) if peer else self.loss
                    if loss and self.rng.random() < loss:
                        self.dropped[node] += 1
                        packet.drop()
                        continue
                    delay = delays.get(src, 0.0) + (self.degraded.added_delay(node, peer) if peer else 0.0)
                    if not delay and not self.jitter:
                        packet.accept()
                        continue
                    key = (node, src)
                    at = release_time(now, delay, self.jitter, self.rng, self.last.get(key, 0.0))
                    self.last[key] = at
                    heapq.heappush(self.heap, (at, next(self.order), packet))
                    if self.heap[0][2] is packet:
                        self.lock.notify()
        except Exception as err:  # noqa: BLE001 - the namespace went away (teardown) or the queue broke
            with self.lock:
                self.errors.append(f"{node}: {err.__class__.__name__}: {err}")

    def _release(self) -> None:
        while True:
            with self.lock:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.lock.wait(None if not self.heap else self.heap[0][0] - time.monotonic())
                due = []
                now = time.monotonic()
                due_at = self.heap[0][0]
                while self.heap and self.heap[0][0] <= now:
                    due.append(heapq.heappop(self.heap)[2])
                late_ms = (now - due_at) * 1000
                self.late[next((i for i, edge in enumerate(LATE_EDGES_MS) if late_ms < edge), len(LATE_EDGES_MS))] += len(due)
            for packet in due:
                try:
                    packet.accept()
                except Exception:  # noqa: BLE001 - its queue is gone (namespace deleted at teardown)
                    pass

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg.get("op")
        if op == "attach":
            self.attach(msg["netns"], msg.get("ifname", "eth0"), msg["node"], msg.get("delays_ms", {}))
            return {"ok": msg["node"]}
        with self.lock:
            if op == "links":
                self.node_of_ip.update({ip: node for node, ip in msg["ips"].items()})
                self.jitter = float(msg.get("jitter_ms", 0)) / 1000
                self.loss = float(msg.get("loss", 0))
                return {"ok": "links"}
            if op == "degrade":
                self.degraded.set(msg["node"], float(msg["delay_ms"]) / 1000, float(msg["loss"]))
                return {"ok": "degrade"}
            if op == "stats":
                return {"ok": "stats", "packets": dict(self.packets), "dropped": dict(self.dropped),
                        "held": len(self.heap), "errors": list(self.errors),
                        "late_ms": dict(zip([f"<{e:g}" for e in LATE_EDGES_MS] + [f">={LATE_EDGES_MS[-1]:g}"], self.late))}
        return {"error": f"unknown op {op!r}"}


def summary(stats: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A run's `stats` answer for the manifest (with the share of packets 10 ms or more late), and
    warnings: it fell behind (above LATE_WARN: the run's latencies include its own delay), or a
    namespace's queue broke."""
    stats = {k: v for k, v in stats.items() if k != "ok"}
    total = sum(stats["late_ms"].values())
    late = stats["late_ms"]["<20"] + stats["late_ms"][">=20"]
    stats["late_10ms_share"] = round(late / total, 4) if total else 0.0
    warnings = [f"delay line: {error}" for error in stats["errors"]]
    if total and late / total > LATE_WARN:
        warnings.insert(0, f"the delay line fell behind: {late / total:.1%} of {total} packets left 10 ms or more "
                           "after their time (too many packets per second for it on this machine); latencies "
                           "include that")
    return stats, warnings


def probe() -> tuple[bool, str]:
    """Can this machine queue packets to user space (NFQUEUE target, nfnetlink_queue, iptables)?"""
    import shutil

    if not shutil.which("iptables"):
        return False, "iptables is not installed (apt-get install iptables)"
    try:
        import fnfqueue
    except ImportError:
        return False, "the Python package fnfqueue is not installed (make setup)"
    try:
        conn = fnfqueue.Connection()
        conn.bind(60000).unbind()
        conn.close()
    except OSError as err:
        return False, f"nfnetlink_queue is not usable ({err}); the kernel needs CONFIG_NETFILTER_NETLINK_QUEUE"
    return True, "NFQUEUE works (iptables and nfnetlink_queue)"


class DelayLineProcess:
    """The orchestrator's side: starts the delay line and speaks its protocol (one answer per line)."""

    def __init__(self, seed: int = 0, python: list[str] | None = None):
        """`python`: the interpreter command to start it with (another namespace's, another machine's)."""
        self.proc = subprocess.Popen([*(python or [sys.executable]), "-m", "orchestrator.shaping.delayline",
                                      "--seed", str(seed)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lock = threading.Lock()

    def request(self, **msg: Any) -> dict[str, Any]:
        with self.lock:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the delay line exited (code {self.proc.returncode}); packets are not delayed")
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline() or '{"error": "no answer"}')
        if "error" in answer:
            raise RuntimeError(f"delay line, {msg['op']}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # EOF: it exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class DelayLines:
    """A run's delay line as the runner uses it: one process for every namespace, or, with `python_in`
    (node -> the command of a Python in that node's namespace), one inside each node's namespace.
    `attach` goes to the node's process; `links` and `degrade` to every one (a degraded node's packets
    are held where they arrive); `stats` adds up their answers."""

    def __init__(self, seed: int, nodes: list[str], netns_path: Callable[[str], str],
                 python_in: Callable[[str], list[str]] | None = None):
        self.netns_path = netns_path if python_in is None else (lambda _node: OWN_NETNS)
        if python_in is None:
            self.lines = {None: DelayLineProcess(seed)}
        else:
            self.lines = {node: DelayLineProcess(seed + i, python_in(node)) for i, node in enumerate(nodes)}

    def _each(self, msg: dict[str, Any]) -> list[dict[str, Any]]:
        if len(self.lines) == 1:
            return [line.request(**msg) for line in self.lines.values()]
        with ThreadPoolExecutor(max_workers=16) as pool:
            return list(pool.map(lambda line: line.request(**msg), self.lines.values()))

    def attach(self, node: str, ifname: str, delays_ms: dict[str, float]) -> dict[str, Any]:
        line = self.lines.get(node) or self.lines[None]
        return line.request(op="attach", netns=self.netns_path(node), ifname=ifname, node=node, delays_ms=delays_ms)

    def request(self, **msg: Any) -> dict[str, Any]:
        answers = self._each(msg)
        if msg["op"] != "stats":
            return answers[0]
        total: dict[str, Any] = {"ok": "stats", "packets": {}, "dropped": {}, "held": 0, "errors": [], "late_ms": {}}
        for answer in answers:
            total["packets"].update(answer["packets"])
            total["dropped"].update(answer["dropped"])
            total["held"] += answer["held"]
            total["errors"] += answer["errors"]
            for edge, count in answer["late_ms"].items():
                total["late_ms"][edge] = total["late_ms"].get(edge, 0) + count
        return total

    def close(self) -> None:
        for line in self.lines.values():
            line.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.shaping.delayline",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", action="store_true", help="say whether NFQUEUE works here, and exit")
    parser.add_argument("--seed", type=int, default=0, help="jitter and loss draws")
    args = parser.parse_args(argv)
    if args.probe:
        ok, why = probe()
        print(why)
        return 0 if ok else 1
    # Threads (two per namespace, one releasing) take turns on the GIL; the default 5 ms turn would be
    # added to a packet's delay whenever a reader holds the GIL when the packet falls due.
    sys.setswitchinterval(0.0002)
    # netem's timers run in softirq, ahead of every process; the nearest user-space equivalent is a
    # real-time priority, so that busy nodes on few cores do not hold packets past their time.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (PermissionError, OSError) as err:
        print(f"delay line: no real-time priority ({err}); packets may leave late on a busy machine",
              file=sys.stderr)
    line_ = DelayLine(args.seed)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = line_.handle(json.loads(line))
        except Exception as err:  # noqa: BLE001 - answer with the error; the orchestrator raises it
            answer = {"error": f"{err.__class__.__name__}: {err}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
