"""`peerlab bench delayline`: how many packets per second the delay line carries on time.

Namespaces on one bridge (in a hub namespace of their own): `senders` nodes with an HTB uplink at
`rate` each (the run's egress tree, orchestrator/shaping) and `receivers`; the delay line attached to
every node with the same one-way delay towards every other. Each sender writes a `message` on its
`streams` connections at once, round after round (bench_delayline_node.py), for `duration` seconds.
It prints the packets per second through the line, the share released 10 ms or more after their
time, the round trip between the two receivers under that load against the configured one, and the
senders' goodput against their rate.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pyroute2 import NetNS

from orchestrator.fidelity import host
from orchestrator.procfs import cpu_s
from orchestrator.shaping import delayline, ops, tc

ROOT = Path(__file__).resolve().parents[2]
SUBNET = "10.77.0"


def _ns(tag: str) -> str:
    return f"plb{os.getpid() % 0x100000:05x}-{tag}"  # a run's name pattern: `peerlab clean` finds leftovers


def _build(nodes: list[str], hub: str, rate_bps: int) -> dict[str, str]:
    """Each node's eth0 on the hub's bridge, its address, and its uplink's HTB; node -> address."""
    ips = {}
    for name in [hub, *nodes]:
        subprocess.run(["ip", "netns", "add", _ns(name)], check=True)
    with NetNS(_ns(hub), flags=0) as ns:
        ns.link("add", ifname="br0", kind="bridge")
        ns.link("set", index=ns.link_lookup(ifname="br0")[0], state="up")
        for i, node in enumerate(nodes):
            ns.link("add", ifname=f"v-{node}", kind="veth", peer={"ifname": "eth0", "net_ns_fd": _ns(node)})
            idx = ns.link_lookup(ifname=f"v-{node}")[0]
            ns.link("set", index=idx, master=ns.link_lookup(ifname="br0")[0], state="up")
            ips[node] = f"{SUBNET}.{i + 1}"
    for node in nodes:
        with NetNS(_ns(node), flags=0) as ns:
            idx = ns.link_lookup(ifname="eth0")[0]
            ns.addr("add", index=idx, address=ips[node], prefixlen=24)
            ns.link("set", index=idx, state="up")
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
            tc.shape_egress(ns, "eth0", rate_bps)
    return ips


def _start(node: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(["ip", "netns", "exec", _ns(node), sys.executable, "-m",
                             "orchestrator.tools.bench_delayline_node", *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {"ok": "stats", "held": after["held"], "errors": after["errors"],
            "packets": {k: v - before["packets"].get(k, 0) for k, v in after["packets"].items()},
            "dropped": {k: v - before["dropped"].get(k, 0) for k, v in after["dropped"].items()},
            "late_ms": {k: v - before["late_ms"].get(k, 0) for k, v in after["late_ms"].items()}}


def bench_delayline(senders: int, receivers: int, rate_bps: int, delay_ms: float, streams: int, message: int,
                    duration: float, say=print) -> dict[str, Any]:
    senders_, receivers_ = [f"s{i}" for i in range(senders)], [f"r{i}" for i in range(receivers)]
    nodes = senders_ + receivers_
    line = None
    procs: list[subprocess.Popen] = []
    try:
        ips = _build(nodes, "hub", rate_bps)
        line = delayline.DelayLineProcess(seed=1)
        line.request(ops.LineLinks(ips, 0, 0))
        for node in nodes:
            line.request(ops.LineAttach(_ns(node), "eth0", node,
                                        {ip: delay_ms for peer, ip in ips.items() if peer != node}))
        say(f"delay line bench: {senders} senders x {streams} streams of {message} B messages -> {receivers} "
            f"receivers, {rate_bps / 1e6:g} Mbit/s per sender, one-way {delay_ms:g} ms, {duration:g} s "
            f"({' '.join(line.proc.args[:1])})")
        start = time.monotonic() + 3  # connections are set up before (each handshake is a round trip)
        warmup = min(2.0, duration / 4)
        common = ["--start", str(start), "--warmup", str(warmup), "--duration", str(duration)]
        to = ",".join(ips[r] for r in receivers_)
        recv = [_start(r, "receiver", "--addr", ips[r], *common,
                       *(["--ping", ips[receivers_[1]]] if i == 0 and receivers > 1 else [])) for i, r in enumerate(receivers_)]
        time.sleep(0.5)
        send = [_start(s, "sender", "--to", to, "--streams", str(streams), "--message", str(message), *common)
                for s in senders_]
        procs = recv + send
        time.sleep(max(0.0, start - time.monotonic()))
        before, cpu, machine = line.request(ops.LineStats()), cpu_s(line.proc.pid), host.read(time.monotonic())
        time.sleep(duration)
        cpu, busy = cpu_s(line.proc.pid) - cpu, host.sample(machine, host.read(time.monotonic()), host.cores()).busy
        outs = [json.loads(p.communicate(timeout=duration + 60)[0].strip().splitlines()[-1]) for p in procs]
        stats = _delta(line.request(ops.LineStats()), before)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if line:
            line.close()
        for name in ["hub", *nodes]:
            subprocess.run(["ip", "netns", "del", _ns(name)], capture_output=True)
    received = [o for o in outs if "bytes" in o]
    window = received[0]["window_s"]
    by_sender = {ip: 0 for ip in (ips[s] for s in senders_)}
    for o in received:
        for ip, n in o["bytes"].items():
            by_sender[ip] = by_sender.get(ip, 0) + n
    goodput = [n * 8 / window / 1e6 for n in by_sender.values()]
    rtts = sorted(r for o in received for r in o["rtt_ms"])
    summary, _ = delayline.summary(stats)
    packets = sum(stats["packets"].values())
    result = {"packets": packets, "packets_per_s": packets / duration, "late_10ms_share": summary["late_10ms_share"],
              "late_ms": stats["late_ms"], "dropped": sum(stats["dropped"].values()), "errors": stats["errors"],
              "rtt_ms_median": statistics.median(rtts) if rtts else None,
              "rtt_ms_p99": rtts[int(0.99 * (len(rtts) - 1))] if rtts else None, "rtt_ms_configured": 2 * delay_ms,
              "goodput_mbit_per_sender": statistics.mean(goodput), "goodput_mbit_min": min(goodput),
              "line_cpu_share": cpu / duration, "machine_busy_share": busy}
    say(f"packets through the line: {packets} ({result['packets_per_s']:.0f}/s), dropped {result['dropped']}")
    say(f"released 10 ms or more late: {result['late_10ms_share']:.2%}  (by lateness: {stats['late_ms']})")
    if rtts:
        say(f"RTT under load (receiver to receiver, {len(rtts)} samples): median {result['rtt_ms_median']:.1f} ms, "
            f"p99 {result['rtt_ms_p99']:.1f} ms, configured {2 * delay_ms:g} ms")
    say(f"goodput per sender: mean {result['goodput_mbit_per_sender']:.1f} Mbit/s, min {min(goodput):.1f} "
        f"(rate {rate_bps / 1e6:g} Mbit/s in frames, about {rate_bps / 1e6 * 1448 / 1514:.1f} of payload)")
    say(f"CPU: the delay line {cpu:.1f} s in {duration:g} s ({result['line_cpu_share']:.0%} of one core); the "
        f"machine was {result['machine_busy_share']:.0%} busy (all {os.cpu_count()} cores, everything on it)")
    for error in stats["errors"]:
        say(f"delay line error: {error}")
    return result
