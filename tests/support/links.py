"""Two network namespaces joined by a veth pair (a: 10.9.0.1, b: 10.9.0.2 and more), and what the
shaping tests measure across it: TCP connects, a TCP stream's goodput, ICMP round trips."""
from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

from pyroute2 import NetNS, netns

A_ADDR, B_ADDR = "10.9.0.1", "10.9.0.2"


def scratch_name(tag: str) -> str:
    """A namespace name of this test process's own (`plf<pid>-<tag>`, a run's pattern so that
    `peerlab clean` finds one left behind): two tests side by side never pick the same."""
    return f"plf{os.getpid() % 0x100000:05x}-{tag}"


@contextmanager
def veth_pair(name: str | None = None) -> Iterator[tuple[str, str]]:
    """Namespaces `<name>a` and `<name>b`, each with an `eth0` end of one veth pair (no addresses)."""
    name = name or scratch_name("t")
    a, b = f"{name}a", f"{name}b"
    netns.create(a)
    netns.create(b)
    try:
        with NetNS(a, flags=0) as ns:
            ns.link("add", ifname="eth0", kind="veth", peer={"ifname": "eth0", "net_ns_fd": b})
        yield a, b
    finally:
        netns.remove(a)
        netns.remove(b)


def address(a: str, b: str, *more_on_b: str) -> None:
    """10.9.0.1 on a's end, 10.9.0.2 (and `more_on_b`) on b's; links and loopbacks up."""
    for name, addrs in ((a, [A_ADDR]), (b, [B_ADDR, *more_on_b])):
        with NetNS(name, flags=0) as ns:
            idx = ns.link_lookup(ifname="eth0")[0]
            for addr in addrs:
                ns.addr("add", index=idx, address=addr, prefixlen=24)
            ns.link("set", index=idx, state="up")
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")


def connects(src_ns: str, addr: str, port: int, within: float = 1.0) -> bool:
    """Can a TCP connection be opened from inside `src_ns`? Tries for `within` seconds (a server just
    started may not listen yet; a cut link never answers)."""
    code = (f"import socket,sys,time\nend=time.monotonic()+{within}\nwhile True:\n try:\n"
            f"  socket.create_connection(('{addr}',{port}),timeout=1).close(); break\n"
            " except OSError:\n  if time.monotonic()>end: sys.exit(1)\n  time.sleep(0.1)")
    return subprocess.run(["ip", "netns", "exec", src_ns, sys.executable, "-c", code]).returncode == 0


def stream(src_ns: str, dst_ns: str, addr: str, seconds: float = 3.0, skip: float = 0.0) -> tuple[int, float, int]:
    """One TCP stream from src_ns to `addr` (in dst_ns) for `seconds`: the payload bytes the receiver
    got after the first `skip` seconds (TCP's slow start, long where the latency is), the time from
    then to its last byte, and all the payload bytes it got."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", dst_ns, sys.executable, "-c",
         f"import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
         f"s.bind(('{addr}',5002));s.listen(1);c,_=s.accept();total=n=0;t=start=None\n"
         "while True:\n b=c.recv(1<<16)\n if not b: break\n now=time.monotonic();start=start or now;total+=len(b)\n"
         f" if now-start<{skip}: continue\n t=t or now;n+=len(b);e=now\n"
         "print(n, e-t, total)"], stdout=subprocess.PIPE, text=True)
    code = (f"import socket,time\nfor _ in range(100):\n try: c=socket.create_connection(('{addr}',5002)); break\n"
            " except OSError: time.sleep(0.1)\n"
            f"end=time.monotonic()+{seconds + skip};b=b'x'*65536\nwhile time.monotonic()<end: c.sendall(b)\nc.close()")
    subprocess.run(["ip", "netns", "exec", src_ns, sys.executable, "-c", code], check=True)
    out, _ = server.communicate(timeout=60)
    n, span, total = out.split()
    return int(n), float(span), int(total)


def received_mbit(src_ns: str, dst_ns: str, addr: str, seconds: float = 3.0) -> float:
    """Goodput of one TCP stream from src_ns to `addr` (in dst_ns), measured by the receiver."""
    n, span, _ = stream(src_ns, dst_ns, addr, seconds)
    return n * 8 / span / 1e6


def pings(src_ns: str, addr: str, count: int = 5, interval: float = 0.2) -> tuple[list[float], int]:
    """ICMP echo round trips (ms) from `src_ns` to `addr` (iputils ping: answered by the kernel, so
    what is measured is the network, not a process), and how many got no answer."""
    if not shutil.which("ping"):
        raise RuntimeError("ping (iputils-ping) is needed for round-trip checks")
    out = subprocess.run(["ip", "netns", "exec", src_ns, "ping", "-n", "-c", str(count), "-i", str(interval),
                          "-W", "2", addr], capture_output=True, text=True).stdout
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]
    return rtts, count - len(rtts)


def median_rtt_ms(src_ns: str, addr: str, count: int = 5) -> float:
    rtts, _ = pings(src_ns, addr, count)
    assert rtts, f"no answer from {addr}"
    return statistics.median(rtts)
