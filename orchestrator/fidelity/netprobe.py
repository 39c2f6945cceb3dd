"""Calibration probes from outside the node, for nodes that have no probes of their own (an adapter's
node: node/contract.py), run before the nodes start: a small TCP server in the receiver's network namespace and a client in the
sender's, on the nodes' addresses, so the probes cross the same interfaces, tc trees and delay line
as the nodes' traffic. They answer what peerlab's node answers on /calibrate/ping and
/calibrate/throughput (orchestrator/run/calibrate.py): RTTs in ms, and the rate the receiver saw
over the second half of a bulk transfer of twice the probe's bytes, in Mbit/s. The probe's connection
is new, so the first half lets TCP's slow start finish: at 100 ms one way, the rate measured from
the first quarter of 4 MiB was 9% low where peerlab's nodes, probing over their warm connections,
measured 4% low (scenarios/gossipsub-implementations.yaml).
"""
from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.backends import Backend

PORT = 4999  # beside the nodes' data port
PROBE_MARK = "peerlab-probe"  # in each probe's command line: the memory watch counts them apart

SERVER = r"""# peerlab-probe server
import socket, sys, threading, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
print("listening", flush=True)
def serve(c):
    f = c.makefile("rb")
    for line in f:
        if line.startswith(b"ping"):
            c.sendall(line)
        elif line.startswith(b"bulk"):
            total, got, mark = int(line.split()[1]), 0, None
            start = (time.monotonic(), 0)
            while got < total:
                want = min(1 << 16, total - got)
                chunk = f.read1(want)
                if not chunk:
                    return
                got += len(chunk)
                now = time.monotonic()
                # mark only on a read that emptied the socket (a short read): after a stall, data that
                # arrived before the mark but was read after it would count at a rate above the link's
                if mark is None and got >= total // 2 and len(chunk) < want:
                    mark = (now, got)
            if mark is None:  # every read was full: no clean mark, the whole transfer then
                mark = start
            rate = (got - mark[1]) * 8 / max(1e-9, now - mark[0]) / 1e6
            c.sendall(b"%f\n" % rate)
while True:
    conn, _ = s.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

CLIENT = r"""# peerlab-probe client
import json, socket, sys, time
host, port, what, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c = socket.create_connection((host, port), timeout=60)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
f = c.makefile("rb")
if what == "ping":
    rtts = []
    for i in range(n):
        t = time.monotonic(); c.sendall(b"ping %d\n" % i); f.readline(); rtts.append((time.monotonic() - t) * 1000)
    print(json.dumps({"rtt_ms": rtts}))
else:
    c.sendall(b"bulk %d\n" % n)
    chunk, sent = bytes(1 << 16), 0
    while sent < n:
        size = min(len(chunk), n - sent); c.sendall(chunk[:size]); sent += size
    print(json.dumps({"mbit": float(f.readline())}))
"""


CLOCK = r"""# peerlab-probe clock
import sys, time
for line in sys.stdin:
    sys.stdout.write("%d\n" % time.time_ns()); sys.stdout.flush()
"""


class NamespaceProbes:
    """Probe servers in the nodes' namespaces (started when first probed, stopped by `close`), and
    clocks there: where a namespace is on another machine (a pod), its clock is the node's."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.servers: dict[str, asyncio.subprocess.Process] = {}
        self.starting: dict[str, asyncio.Future] = {}
        self.clocks: dict[str, asyncio.subprocess.Process] = {}

    def _exec(self, node_id: str) -> list[str]:
        return [*self.backend.namespaces.python_in(self.backend.link_ends(node_id).node_netns), "-c"]

    async def _server(self, node_id: str) -> None:
        """The node's probe server, started once (probes of several pairs may reach it at once)."""
        if node_id not in self.starting:
            self.starting[node_id] = asyncio.ensure_future(self._start_server(node_id))
            # its failure is raised to every probe awaiting it; if none is left (cancelled, or the run's
            # end killed the server as it started), it is dropped here rather than logged as unretrieved
            self.starting[node_id].add_done_callback(_retrieve)
        await asyncio.shield(self.starting[node_id])

    async def _start_server(self, node_id: str) -> None:
        # stdin a pipe held open until `close`: where the namespace is a pod, the process is a bridge over
        # the exec API, and the end of its stdin ends the process in the pod
        proc = await asyncio.create_subprocess_exec(
            *self._exec(node_id), SERVER, self.backend.address(node_id), str(PORT),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self.servers[node_id] = proc
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line.startswith(b"listening"):
            raise RuntimeError(f"probe server in {node_id}'s namespace: {(await proc.stderr.read()).decode()[-300:]}")

    async def _client(self, a: str, b: str, what: str, n: int, timeout: float) -> dict[str, Any]:
        await self._server(b)
        proc = await asyncio.create_subprocess_exec(
            *self._exec(a), CLIENT, self.backend.address(b), str(PORT), what, str(n),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        reading = asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait())
        try:  # stdin open until the probe ends (as the server's: in a pod, its end would end the probe)
            out, err, _ = await asyncio.wait_for(asyncio.shield(reading), timeout)
        except BaseException:  # a timeout (a loaded host) or a cancellation: the probe ends with it
            if proc.returncode is None:
                proc.kill()
            reading.add_done_callback(_retrieve)
            raise
        finally:
            proc.stdin.close()
        if proc.returncode != 0:
            raise RuntimeError(f"probe {a}->{b}: {err.decode()[-300:]}")
        return json.loads(out)

    async def ping(self, a: str, b: str, count: int, timeout: float) -> dict[str, Any]:
        return await self._client(a, b, "ping", count, timeout)

    async def throughput(self, a: str, b: str, nbytes: int, timeout: float) -> dict[str, Any]:
        return {**await self._client(a, b, "bulk", 2 * nbytes, timeout), "sent_bytes": 2 * nbytes}

    async def clock(self, node_id: str) -> int:
        """The namespace's clock (time.time_ns), read by a process kept in it for the next readings."""
        if node_id not in self.clocks:
            self.clocks[node_id] = await asyncio.create_subprocess_exec(
                *self._exec(node_id), CLOCK, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        proc = self.clocks[node_id]
        proc.stdin.write(b"t\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line:
            raise RuntimeError(f"clock probe in {node_id}'s namespace exited (code {await proc.wait()})")
        return int(line)

    def client(self, node_id: str) -> ProbeClient:
        return ProbeClient(node_id, self)

    async def close(self) -> None:
        for proc in [*self.servers.values(), *self.clocks.values()]:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        self.servers.clear()
        self.starting.clear()
        self.clocks.clear()


class ProbeClient:
    """One node's side of the probes, with the calls calibrate() and clock.estimate() make of a node's
    control API."""

    def __init__(self, node_id: str, probes: NamespaceProbes):
        self.node_id = node_id
        self.probes = probes

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        if path == "/clock":
            return {"ns": await self.probes.clock(self.node_id)}
        raise ValueError(f"a probe answers GET /clock, not {path}")

    async def post(self, path: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        if path == "/calibrate/ping":
            return await self.probes.ping(self.node_id, body["peer"], int(body["count"]), timeout)
        if path == "/calibrate/throughput":
            return await self.probes.throughput(self.node_id, body["peer"], int(body["bytes"]), timeout)
        raise ValueError(f"a probe answers /calibrate/ping and /calibrate/throughput, not {path}")


def _retrieve(future: asyncio.Future) -> None:
    """Mark a background future's outcome as seen (asyncio logs an unseen exception with a traceback)."""
    if not future.cancelled():
        future.exception()
