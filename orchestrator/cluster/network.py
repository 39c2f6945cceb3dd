"""The local cluster's network on the host, and its removal.

    peerlab0            the pods' bridge, made at `up` (before any pod) with the gateway address
                        10.244.0.1/16, where CoreDNS listens; the CNI bridge plugin attaches pods to it
    FORWARD             two ACCEPT rules for the bridge, first in the chain: Docker sets the chain's
                        policy to DROP, and with br_netfilter pod-to-pod frames cross it
    after `down`        no bridge, no rules of ours, none of kube-proxy's (KUBE-*), none of the CNI
                        plugins' (CNI-*), no pod network namespace left behind (cni-*)
"""
from __future__ import annotations

import ipaddress
import os
import shlex
import subprocess
from pathlib import Path

from pyroute2 import IPRoute

from orchestrator.cluster import layout as L

COMMENT = "peerlab-cluster"
FAMILIES = ("iptables", "ip6tables")   # the kubelet and kube-proxy make chains in both
FORWARD_RULES = [["-i", L.BRIDGE, "-j", "ACCEPT"], ["-o", L.BRIDGE, "-j", "ACCEPT"]]


def _iptables(*args: str, table: str = "filter", family: str = "iptables") -> subprocess.CompletedProcess:
    return subprocess.run([family, "-w", "-t", table, *args], capture_output=True, text=True)


def _sysctl(path: str, value: str) -> None:
    p = Path("/proc/sys") / path
    if p.exists() and p.read_text().strip() != value:
        p.write_text(value)


def set_up() -> None:
    """The bridge with its gateway address, forwarding on, the FORWARD rules."""
    _sysctl("net/ipv4/ip_forward", "1")
    _sysctl("net/bridge/bridge-nf-call-iptables", "1")
    net = ipaddress.ip_network(L.POD_CIDR)
    with IPRoute() as ip:
        links = ip.link_lookup(ifname=L.BRIDGE)
        if not links:
            ip.link("add", ifname=L.BRIDGE, kind="bridge")
            links = ip.link_lookup(ifname=L.BRIDGE)
        index = links[0]
        have = {a.get_attr("IFA_ADDRESS") for a in ip.get_addr(index=index)}
        if L.POD_GATEWAY not in have:
            ip.addr("add", index=index, address=L.POD_GATEWAY, prefixlen=net.prefixlen)
        ip.link("set", index=index, state="up")
    for rule in FORWARD_RULES:
        match = [*rule[:-2], "-m", "comment", "--comment", COMMENT, *rule[-2:]]
        if _iptables("-C", "FORWARD", *match).returncode != 0:
            _iptables("-I", "FORWARD", "1", *match)


def _chains(table: str, prefixes: tuple[str, ...], family: str = "iptables") -> list[str]:
    listing = _iptables("-S", table=table, family=family).stdout.splitlines()
    return [line.split()[1] for line in listing if line.startswith("-N ") and line.split()[1].startswith(prefixes)]


def _drop_rules_and_chains(table: str, prefixes: tuple[str, ...], comment: str | None, family: str) -> None:
    """Delete every rule that jumps to one of the chains (or carries the comment), then the chains."""
    chains = _chains(table, prefixes, family)
    for line in _iptables("-S", table=table, family=family).stdout.splitlines():
        parts = shlex.split(line)  # comments are quoted
        if not parts or parts[0] != "-A":
            continue
        jumps = "-j" in parts and parts[parts.index("-j") + 1] in chains
        tagged = comment is not None and comment in parts
        if (jumps or tagged) and parts[1] not in chains:
            _iptables("-D", *parts[1:], table=table, family=family)
    for chain in chains:
        _iptables("-F", chain, table=table, family=family)
    for chain in chains:
        _iptables("-X", chain, table=table, family=family)


# where the kubelet, the CNI library and containerd's shims put things outside the state directory
# (empty once every pod is gone): removed when empty
HOST_DIRS = [Path("/var/lib/cni/results"), Path("/var/lib/cni"), Path("/run/containerd/s"), Path("/run/containerd"),
             Path("/var/log/containers"), Path("/var/log/pods")]


def tear_down() -> list[str]:
    """Remove everything of the cluster's network; what was found and removed, for the user."""
    removed = []
    for family in FAMILIES:
        for table in ("filter", "nat", "mangle"):
            before = _chains(table, ("KUBE-", "CNI-"), family)
            _drop_rules_and_chains(table, ("KUBE-", "CNI-"), COMMENT if table == "filter" else None, family)
            if before:
                removed.append(f"{len(before)} {family} chains in {table}")
    netns = Path("/var/run/netns")
    stale = [p for p in netns.glob("cni-*")] if netns.exists() else []
    for p in stale:
        subprocess.run(["ip", "netns", "delete", p.name], capture_output=True)
    if stale:
        removed.append(f"{len(stale)} pod network namespaces")
    with IPRoute() as ip:
        links = ip.link_lookup(ifname=L.BRIDGE)
        if links:
            ip.link("del", index=links[0])
            removed.append(f"bridge {L.BRIDGE}")
    for d in HOST_DIRS:
        try:
            d.rmdir()
        except OSError:  # not there, or not empty: someone else's
            pass
    return removed


def leftovers() -> list[str]:
    """What of the cluster's network is still on the host (for `status` and the tests)."""
    found = []
    with IPRoute() as ip:
        if ip.link_lookup(ifname=L.BRIDGE):
            found.append(f"bridge {L.BRIDGE}")
    for family in FAMILIES:
        for table in ("filter", "nat", "mangle"):
            chains = _chains(table, ("KUBE-", "CNI-"), family)
            if chains:
                found.append(f"{family} {table}: {', '.join(chains[:3])}{' ...' if len(chains) > 3 else ''}")
    if COMMENT in _iptables("-S", "FORWARD").stdout:
        found.append("iptables FORWARD rules of the cluster")
    if os.path.isdir("/var/run/netns") and any(Path("/var/run/netns").glob("cni-*")):
        found.append("pod network namespaces /var/run/netns/cni-*")
    return found
