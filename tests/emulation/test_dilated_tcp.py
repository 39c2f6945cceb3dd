"""A dilated run's TCP (peerlab_cubic, orchestrator/shaping/dilated_cubic.py): on a link dilated k times,
slow start ends where it ends on the undilated link, measured with real sockets between two real
namespaces through the delay line and HTB; the kernel's cubic on the same dilated link does not."""
import subprocess
import sys
import uuid
from contextlib import contextmanager
from typing import Iterator

import pytest

from orchestrator.backends.local import remove_run_objects
from orchestrator.shaping import dilated_cubic, ops, tcp_settings
from orchestrator.shaping.delayline import DelayLineProcess, probe
from tests.support import links
from tests.support.cli import ROOT

pytestmark = [pytest.mark.emulation, pytest.mark.exclusive]

ONE_WAY_MS, MBIT, BYTES = 10.0, 50.0, 1_500_000  # undilated: 20 ms round trips at 50 Mbit/s
SINK = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("10.9.0.2", 5004)); s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept()
    while c.recv(1 << 20): pass
    c.close()
"""
# one stream of BYTES from a, then its congestion control and slow-start threshold (tcp_info)
CLIENT = f"""
import socket, struct
c = socket.create_connection(("10.9.0.2", 5004), timeout=60)
c.sendall(b"x" * {BYTES})
info = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
name = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode()
print(name, struct.unpack_from("I", info, 76)[0])
"""
UNSET = 0x7FFFFFFF  # tcp_info's slow-start threshold before slow start has ended


@contextmanager
def _pair(k: float) -> Iterator[str]:
    """Namespaces a and b joined by a veth (tests/support/links.py), the link dilated k times: latency
    x k through the delay line, a's upload at the rate / k (HTB). Yields a's name."""
    ok, why = probe()
    assert ok, why
    with links.veth_pair(links.scratch_name("c")) as (a, b):
        links.address(a, b)
        tc = ["ip", "netns", "exec", a, "tc"]
        subprocess.run([*tc, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"], check=True)
        subprocess.run([*tc, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate",
                        f"{MBIT / k:g}mbit"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c", SINK], stdout=subprocess.PIPE,
                                  text=True)
        line = None
        try:
            assert server.stdout.readline() == "ready\n"
            line = DelayLineProcess(seed=1)
            line.request(ops.LineLinks({"a": links.A_ADDR, "b": links.B_ADDR}, 0, 0))
            line.request(ops.LineAttach(b, "eth0", "b", {links.A_ADDR: ONE_WAY_MS * k}))
            line.request(ops.LineAttach(a, "eth0", "a", {links.B_ADDR: ONE_WAY_MS * k}))
            yield a
        finally:
            if line:
                line.close()
            server.kill()
            server.wait()


def _slow_start_end(k: float, sysctls: dict[str, str]) -> tuple[str, int]:
    """On a link dilated k times with `sysctls` in a's namespace: a's stream's congestion control and
    the window at which its slow start ended."""
    with _pair(k) as a:
        tcp_settings.write_in_netns(f"/run/netns/{a}", sysctls)
        out = subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", CLIENT], capture_output=True,
                             text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    name, ssthresh = out.stdout.split()
    return name, int(ssthresh)


def test_slow_start_on_a_dilated_link_ends_where_it_ends_undilated():
    k, run = 10.0, f"test-{uuid.uuid4().hex[:8]}"
    _, undilated = _slow_start_end(1.0, tcp_settings.netns_sysctls("cubic", 1.0))
    assert undilated != UNSET  # HyStart ended it before the stream did: there is an end to compare
    kernels, in_kernels_cubic = _slow_start_end(k, tcp_settings.netns_sysctls("cubic", k))
    dilated_cubic.claim(run)
    try:
        ours, in_peerlab_cubic = _slow_start_end(k, tcp_settings.netns_sysctls("cubic", k, in_experiment_time=True))
        assert dilated_cubic.registered()
    finally:
        dilated_cubic.release(run)
    assert (kernels, ours) == ("cubic", dilated_cubic.NAME)
    # the kernel's cubic measures HyStart's ACK spacing (2 ms) and delay rise (4-16 ms) in real time:
    # at k = 10 the ACKs of a full link are 4.8 ms apart, never a train, and slow start runs on past
    # the undilated end (here to the end of the stream)
    assert not 0.75 * undilated <= in_kernels_cubic <= 1.25 * undilated, (undilated, in_kernels_cubic)
    # peerlab_cubic divides every time it reads by the namespace's k (its minimum RTO / 200 ms)
    assert 0.75 * undilated <= in_peerlab_cubic <= 1.25 * undilated, (undilated, in_peerlab_cubic)
    if not any(dilated_cubic.CLAIMS.iterdir()):  # no other run on the machine holds it
        assert not dilated_cubic.registered()



def test_a_killed_runs_claim_is_let_go_with_its_namespaces():
    """What a run's teardown and `peerlab clean` both call (`remove_run_objects`) releases its claim:
    a killed dilated run does not keep peerlab_cubic registered."""
    short = uuid.uuid4().hex[:6]
    dilated_cubic.claim(short)
    assert dilated_cubic.registered() and (dilated_cubic.CLAIMS / short).exists()
    remove_run_objects(short)
    assert not (dilated_cubic.CLAIMS / short).exists()
    if not any(dilated_cubic.CLAIMS.iterdir()):
        assert not dilated_cubic.registered()


def test_a_run_of_another_user_lets_go_of_nothing_and_does_not_fail():
    """An unprivileged user's run (the kubernetes backend needs no root) claims nothing, and its
    teardown's release must not trip over root's claims directory, which it may not even look into."""
    short = uuid.uuid4().hex[:6]
    dilated_cubic.claim(short)  # the directory exists, root's
    try:
        code = "from orchestrator.shaping import dilated_cubic; dilated_cubic.release('x1y2z3')"
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                              code], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert (dilated_cubic.CLAIMS / short).exists()
    finally:
        dilated_cubic.release(short)
