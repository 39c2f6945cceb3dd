"""The delay line: per-pair latency for kernels without sch_netem, applied outside every node.

Where netem is missing no qdisc here can hold a packet back (no fq, etf or sfq either), so the
delay is applied in user space through netfilter's NFQUEUE. In each node's network namespace one
rule sends every IPv4 packet that arrives on its interface to a queue:

    iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0

and the delay line holds each packet, by its source address, for the one-way latency of the pair
(plus jitter that never reorders one direction, and the fault timeline's degradations), then
accepts it. Packets are taken at the receiver because there the kernel has already released them
from the sender's socket: held at the sender they would count against TCP small queues and cap a
connection at a few packets per round trip (netem avoids that by orphaning what it delays). The
queue is bound without fail-open: if the delay line dies, the run's packets stop instead of flowing
without their latency. GSO packets are queued whole, so a bulk transfer costs few verdicts.

The packet path is native (orchestrator/shaping/native: C on libnetfilter_queue, one worker thread
per core, each with its own queues, timer and heap of held packets; native_build.py builds it once
per version into the user's cache). This module starts it and speaks its protocol: the typed
operations of ops.py (`LineOp`), as JSON lines.

Every node of a run, whoever wrote it, is delayed by this one mechanism, and the calibration
measures it like netem. One process serves all the namespaces of a machine (`DelayLines`): on this
one, every namespace of a run; on a cluster, one per cluster node, started by that node's shaping
daemon (its shaper agent, agent.py) and spoken to through it, attached to each pod's namespace there.
`python -m orchestrator.shaping.delayline` runs the image's binary. It reads JSON lines on stdin and
answers each with one JSON line on stdout:

    {"op": "attach", "netns": "/var/run/netns/plab-n3", "ifname": "eth0", "node": "n3",
     "delays_ms": {"10.1.0.5": 40.0, ...}}                  -> {"ok": "n3"}
    {"op": "links", "ips": {"n3": "10.1.0.5", ...}, "jitter_ms": 2, "loss": 0.0}
    {"op": "degrade", "node": "n3", "delay_ms": 100, "loss": 0.1, "jitter_ms": 0}  (zeros restore)
    {"op": "stats"} -> {"ok": "stats", "packets": {...}, "dropped": {...}, "held": 0, "errors": [],
                        "late_ms": {"<0.1": ..., ..., ">=20": ...}}

It exits when stdin closes. `python -m orchestrator.shaping.delayline --probe` says whether NFQUEUE
works here (exit 0) or why not.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from orchestrator.shaping import native_build, ops
from orchestrator.shaping.line_channel import PipeLines

LATE_WARN = 0.01          # share of packets released 10 ms or more late above which a run warns
# `python -m orchestrator.shaping.delayline` would warn that the package imported the module first
MODULE = ["-c", "import sys; from orchestrator.shaping.delayline import main; sys.exit(main(sys.argv[1:]))"]


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
    """Is the native delay line here (built, or buildable now), and can this machine queue packets to
    user space (NFQUEUE target, nfnetlink_queue, iptables)? Asks the binary itself (`--probe`)."""
    try:
        binary = native_build.path()
    except native_build.BuildError as err:
        return False, str(err).splitlines()[0]
    done = subprocess.run([str(binary), "--probe"], capture_output=True, text=True, timeout=30)
    return done.returncode == 0, (done.stdout.strip() or done.stderr.strip() or f"exit code {done.returncode}")


class DelayLineProcess:
    """The orchestrator's side: starts the delay line and speaks its protocol (one answer per line)."""

    def __init__(self, seed: int = 0, python: list[str] | None = None, preexec: Callable[[], None] | None = None):
        """`python`: the command of a Python elsewhere (in another namespace, on another machine) to start
        it with (`-m orchestrator.shaping.delayline` runs the binary there); else the binary, here.
        `preexec`: run in its process before the binary (realtime.preexec)."""
        command = [*python, *MODULE] if python else [str(native_build.path())]
        self.lines = PipeLines([*command, "--seed", str(seed)], preexec)
        self.lock = threading.Lock()

    @property
    def proc(self) -> subprocess.Popen:
        """The delay line's process (its pid and command: the benchmark reads them)."""
        return self.lines.proc

    def request(self, op: ops.LineOp) -> dict[str, Any]:
        """The operation's answer (a line of JSON each way)."""
        with self.lock:
            code = self.lines.proc.poll()
            if code is not None:
                raise RuntimeError(f"the delay line exited (code {code}); packets are not delayed")
            try:
                self.lines.send(json.dumps(ops.wire(op)))
                answer = json.loads(self.lines.receive(0))
            except RuntimeError:
                answer = {"error": "no answer"}
        if "error" in answer:
            raise RuntimeError(f"delay line, {op.op}: {answer['error']}")
        return answer

    def close(self) -> None:
        self.lines.close()


class DelayLines:
    """A run's delay lines as the runner uses them: one process for every namespace, or, with `line_of`
    (node, seed -> the delay line of the machine the node is on, with `request` and `close`: one
    object for all the nodes of a machine), one per machine. `attach` goes to the node's line, with
    the node's namespace file as that line sees it (`netns_path`); `links` and `degrade` to every
    line (a degraded node's packets are held where they arrive); `stats` adds up their answers."""

    def __init__(self, seed: int, nodes: list[str], netns_path: Callable[[str], str],
                 line_of: Callable[[str, int], Any] | None = None):
        self.netns_path = netns_path
        if line_of is None:
            self.line_of: dict[str, Any] = {}
            self.lines = [DelayLineProcess(seed)]
        else:
            self.line_of = {node: line_of(node, seed) for node in nodes}
            self.lines = list({id(line): line for line in self.line_of.values()}.values())

    def _each(self, op: ops.LineOp) -> list[dict[str, Any]]:
        if len(self.lines) == 1:
            return [self.lines[0].request(op)]
        with ThreadPoolExecutor(max_workers=16) as pool:
            return list(pool.map(lambda line: line.request(op), self.lines))

    def attach(self, node: str, ifname: str, delays_ms: dict[str, float]) -> dict[str, Any]:
        line = self.line_of.get(node) or self.lines[0]
        return line.request(ops.LineAttach(self.netns_path(node), ifname, node, delays_ms))

    def request(self, op: ops.LineOp) -> dict[str, Any]:
        """`op` on every line: the first's answer, or for `LineStats` their counters added up."""
        answers = self._each(op)
        if not isinstance(op, ops.LineStats):
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
        for line in self.lines:
            line.close()


def main(argv: list[str] | None = None) -> int:
    """`--probe`, or become the native delay line (where only a Python can be started)."""
    parser = argparse.ArgumentParser(prog="python -m orchestrator.shaping.delayline",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", action="store_true", help="say whether NFQUEUE works here, and exit")
    parser.add_argument("--seed", type=int, default=0, help="jitter and loss draws")
    args = parser.parse_args(argv)
    if args.probe:
        ok, why = probe()
        print(why)
        return 0 if ok else 1
    try:
        binary = str(native_build.path())
    except native_build.BuildError as err:
        print(f"delay line: {err}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(binary, [binary, "--seed", str(args.seed)])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
