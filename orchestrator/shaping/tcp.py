"""TCP's own timers in a dilated run: the per-namespace sysctls that scale them with the network.

A dilated run's links are k times slower in real time (docs/dilation.md), so TCP measures round trips
k times longer and its retransmission timeout follows them, but its floor does not: Linux's minimum
RTO (200 ms) stays real, and the RTO also decides when an idle connection restarts slow start. At
k = 8 and 100 ms links, an undilated RTO of 400 ms (200 ms round trip + the floor) became 225 ms of
experiment time: connections idle for 225-400 ms restarted their window in the dilated run and not in
the undilated one. Since Linux 6.11 the floor is a per-namespace sysctl, which every backend sets
where it makes a node's network namespace (before the node opens a socket: TCP reads it when a socket
is created). Kernels without it keep the real floor. What no sysctl scales (the delayed ACK's 40 ms,
SYN retransmission) is listed in docs/dilation.md."""
from __future__ import annotations

import os
import subprocess

RTO_MIN_SYSCTL = "net.ipv4.tcp_rto_min_us"
RTO_MIN_US = 200_000  # Linux's TCP_RTO_MIN
RTO_MIN_PATH = "/proc/sys/net/ipv4/tcp_rto_min_us"


def netns_sysctls(dilation: float) -> dict[str, str]:
    """The sysctls of a node's namespace for `dilation`: none when undilated, or where this kernel
    has no such sysctl (every backend's namespaces are this machine's kernel's)."""
    if dilation <= 1 or not os.path.exists(RTO_MIN_PATH):
        return {}
    return {RTO_MIN_SYSCTL: str(round(RTO_MIN_US * dilation))}


def apply_in_netns(netns: str, sysctls: dict[str, str]) -> None:
    """Write `sysctls` in the named network namespace (`ip netns exec NAME sysctl -w`)."""
    if not sysctls:
        return
    subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in sysctls.items())],
                   check=True, capture_output=True, text=True)
