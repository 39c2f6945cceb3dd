"""TCP in every node's network namespace: its congestion control, and in a dilated run its minimum RTO.

Congestion control (`network.tcp_congestion`, default cubic): machines differ in their default (this
one's is bbr, which has no slow start restart after idle and sizes its window from measured bandwidth),
and the default decides how fast a 50 KB message leaves a cold or idle connection. Each node's
namespace gets the scenario's, so a run means the same thing on every machine, and the simulator's
window (node/simulated/access_link.py, cubic's slow start and idle restart) models what the emulation runs.

A dilated run's links are k times slower in real time (docs/dilation.md), so TCP measures round trips
k times longer and its retransmission timeout follows them, but its floor does not: Linux's minimum
RTO (200 ms) stays real, and the RTO also decides when an idle connection restarts slow start. At
k = 8 and 100 ms links, an undilated RTO of 400 ms (200 ms round trip + the floor) became 225 ms of
experiment time: connections idle for 225-400 ms restarted their window in the dilated run and not in
the undilated one. Since Linux 6.11 the floor is a per-namespace sysctl, which every backend sets
where it makes a node's network namespace (before the node opens a socket: TCP reads it when a socket
is created). Kernels without it keep the real floor. What no sysctl scales (the delayed ACK's 40 ms,
SYN retransmission) is listed in docs/dilation.md.

Node namespaces the local backend makes also get TCP socket tables of their own (`own_socket_tables`)."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from orchestrator.shaping import dilated_cubic

if TYPE_CHECKING:
    from orchestrator.model.plan import RunPlan

RTO_MIN_SYSCTL = "net.ipv4.tcp_rto_min_us"
RTO_MIN_US = 200_000  # Linux's TCP_RTO_MIN
RTO_MIN_PATH = "/proc/sys/net/ipv4/tcp_rto_min_us"
CONGESTION_SYSCTL = "net.ipv4.tcp_congestion_control"
AVAILABLE_PATH = "/proc/sys/net/ipv4/tcp_available_congestion_control"
ALLOWED_PATH = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
HOST = "host"
CHILD_EHASH_PATH = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")
NODE_EHASH_BUCKETS = 4096


@contextlib.contextmanager
def own_socket_tables() -> Iterator[None]:
    """Network namespaces created inside get a TCP socket hash table of their own (Linux 6.1+,
    net.ipv4.tcp_child_ehash_entries) instead of sharing the host's, so reading a node's sockets
    (/proc/net/tcp, as gossipsub-interop's shim does every 0.2 s) walks its 4096 buckets, not the
    host's hundreds of thousands: 0.05 ms a read against 3.4 ms here, where 100 nodes reading 5 times
    a second took the two cores. The host's value is restored after; runs creating namespaces at the
    same time take turns. A kernel without the sysctl shares the host's table, as before."""
    if not CHILD_EHASH_PATH.exists():
        yield
        return
    with creating_namespaces():
        before = CHILD_EHASH_PATH.read_text().strip()
        CHILD_EHASH_PATH.write_text(str(NODE_EHASH_BUCKETS))
        try:
            yield
        finally:
            CHILD_EHASH_PATH.write_text(before)


@contextlib.contextmanager
def creating_namespaces() -> Iterator[None]:
    """Held while a run creates namespaces with its own table size: inside, no other run's value is
    in the host's setting (what reads the host's own value must hold it too)."""
    with open(Path(tempfile.gettempdir()) / "peerlab-netns-create.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def available_congestion() -> list[str]:
    try:
        with open(AVAILABLE_PATH) as f:
            return f.read().split()
    except OSError:
        return []


def ensure_allowed(congestion: str) -> None:
    """A namespace other than the host's may only choose a congestion control of the host's
    `tcp_allowed_congestion_control` (here: reno and bbr, not cubic): add it there. The list says
    what namespaces may choose and changes no default, so it is left as it is after the run (other
    runs may be using it)."""
    if congestion == HOST:
        return
    with open(ALLOWED_PATH) as f:
        allowed = f.read().split()
    if congestion not in allowed:
        with open(ALLOWED_PATH, "w") as f:
            f.write(" ".join([*allowed, congestion]))


def netns_sysctls(congestion: str, dilation: float, in_experiment_time: bool = False) -> dict[str, str]:
    """The sysctls of a node's namespace: its congestion control (none for `host`; with
    `in_experiment_time`, cubic's claimed twin peerlab_cubic) and, dilated, the minimum RTO times k
    where this kernel has that sysctl (every backend's namespaces are this machine's kernel's). Raises
    ValueError naming the field if the kernel lacks the algorithm."""
    sysctls = {}
    if congestion != HOST:
        have = available_congestion()
        if have and congestion not in have:
            raise ValueError(f"network.tcp_congestion: {congestion!r} is not available in this kernel "
                             f"(it has {', '.join(have)}); choose one of those, or host")
        sysctls[CONGESTION_SYSCTL] = dilated_cubic.NAME if in_experiment_time else congestion
    if dilation > 1 and os.path.exists(RTO_MIN_PATH):
        sysctls[RTO_MIN_SYSCTL] = str(round(RTO_MIN_US * dilation))
    return sysctls


def host_namespaces_sysctls(plan: RunPlan, run: str) -> dict[str, str]:
    """The sysctls for node namespaces on this machine's kernel (the local and docker backends), made
    settable there: the plan's congestion control added to the host's allowed list first, and a
    dilated run's cubic in experiment time where it can be had (`claim_in_experiment_time`)."""
    ensure_allowed(plan.tcp_congestion)
    return netns_sysctls(plan.tcp_congestion, plan.dilation, claim_in_experiment_time(plan, run))


def wants_experiment_time(plan: RunPlan) -> bool:
    """Would this run's namespaces get peerlab_cubic where it can be had: dilated, with cubic."""
    return plan.dilation > 1 and plan.tcp_congestion == "cubic"


def claim_in_experiment_time(plan: RunPlan, run: str) -> bool:
    """A dilated run with cubic: peerlab_cubic claimed on this machine's kernel for run `run`
    (`release_host_namespaces` lets it go); False for any other run, or where it cannot be had, then
    with a warning saying why (the run keeps the kernel's cubic)."""
    if not wants_experiment_time(plan):
        return False
    try:
        dilated_cubic.claim(run)
        return True
    except dilated_cubic.Unavailable as err:
        print(f"peerlab: warning: this dilated run's TCP is the kernel's cubic, whose HyStart and curve run on "
              f"real time (docs/dilation.md#tcp): {err}", file=sys.stderr, flush=True)
        return False


def release_host_namespaces(run: str) -> None:
    """What `claim_in_experiment_time` claimed for run `run`, let go (its teardown; `peerlab clean`)."""
    dilated_cubic.release(run)


def write_in_netns(netns: str | None, sysctls: dict[str, str]) -> dict[str, str]:
    """Write `sysctls` in the network namespace of the file `netns` (/proc/PID/ns/net, /run/netns/NAME;
    None: this process's) through /proc/sys, from a thread that enters it (a namespace is a thread's,
    and /proc/sys/net shows the reader's); each as read back. What a cluster node's shaping daemon
    does in a pod's namespace before its node starts: no pod sysctl, so nothing for the kubelet or
    Pod Security to refuse; the local backend does the same in each namespace it makes. Raises
    RuntimeError naming the sysctl and the fix."""
    done: dict[str, str] = {}
    if not sysctls:
        return done
    failed: list[BaseException] = []

    def enter_and_write() -> None:
        try:
            if netns is not None:
                from pyroute2 import netns as pyroute2_netns
                fd = os.open(netns, os.O_RDONLY)
                try:
                    pyroute2_netns.setns(fd)
                finally:
                    os.close(fd)
            for name, value in sysctls.items():
                path = Path("/proc/sys") / name.replace(".", "/")
                try:
                    path.write_text(value)
                except OSError as err:
                    raise RuntimeError(_refused(name, value, err)) from None
                done[name] = path.read_text().strip()
        except BaseException as err:  # noqa: BLE001 - raised in the caller's thread
            failed.append(err)
    thread = threading.Thread(target=enter_and_write, name="sysctls-in-netns")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return done


def _refused(name: str, value: str, err: OSError) -> str:
    if err.errno == errno.ENOENT:
        since = " (a namespace's minimum RTO is Linux 6.11's)" if name == RTO_MIN_SYSCTL else ""
        return f"{name}: this machine's kernel has no such sysctl{since}"
    if name == CONGESTION_SYSCTL:
        return (f"{name}={value} refused ({err.strerror}): a namespace may only choose what its machine's "
                f"net.ipv4.tcp_allowed_congestion_control lists; on that machine (each cluster node) run "
                f"`sysctl -w net.ipv4.tcp_allowed_congestion_control=\"$(cat {ALLOWED_PATH}) {value}\"`, "
                "or set network.tcp_congestion: host")
    return f"{name}={value} refused: {err.strerror}"
