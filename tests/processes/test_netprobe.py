"""Probes beside adapter nodes (orchestrator/fidelity/netprobe.py), here against 127.0.0.1 with no namespace:
a ping answers; a probe that outlives its timeout, or is cancelled as the run ends, ends with its
process killed and nothing logged about it afterwards (a loaded host times probes out: the run goes
on, and its output stays free of tracebacks)."""
from __future__ import annotations

import asyncio
import gc
import statistics
import sys

import pytest

from orchestrator.fidelity import netprobe
from orchestrator.shaping.mechanisms import LinkEnds


class HostNamespaces:
    def python_in(self, where: str) -> list[str]:
        assert where.startswith("ns-of-"), where  # the namespace the backend's link_ends names, not the node
        return [sys.executable]


class HostBackend:
    """Every node's "namespace" is this host's (the probes' processes are plain Pythons)."""

    namespaces = HostNamespaces()

    def link_ends(self, node_id: str) -> LinkEnds:
        return LinkEnds(f"ns-of-{node_id}", "eth0", "switch", f"v{node_id}")

    def address(self, node_id: str) -> str:
        return "127.0.0.1"


@pytest.mark.slow
def test_a_probe_answers_and_one_timed_out_or_cancelled_is_killed_without_a_logged_traceback(monkeypatch):
    monkeypatch.setattr(netprobe, "PORT", 47999)
    logged: list[dict] = []

    async def scenario() -> dict:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: logged.append(context))
        probes = netprobe.NamespaceProbes(HostBackend())
        try:
            answer = await probes.ping("a", "b", 3, timeout=30)
            spawned = []
            real = asyncio.create_subprocess_exec

            async def spawn(*args, **kwargs):
                spawned.append(await real(*args, **kwargs))
                return spawned[-1]

            monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
            # a bulk transfer of 2 TiB cannot end in 0.5 s (loopback here moves 2 GiB in about 0.5 s:
            # the 1 GiB asked before sometimes ended before the timeout or the cancellation below)
            with pytest.raises(asyncio.TimeoutError):
                await probes.throughput("a", "b", 1 << 40, timeout=0.5)
            await asyncio.wait_for(spawned[0].wait(), 10)  # killed, not left running
            # cancelled (as the run's end cancels its probe rounds): the same
            task = asyncio.ensure_future(probes.throughput("a", "b", 1 << 40, timeout=60))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(spawned[1].wait(), 10)
            await asyncio.sleep(0.2)
            gc.collect()
            return answer
        finally:
            await probes.close()

    answer = asyncio.run(scenario())
    gc.collect()
    # three round trips over loopback; their median is what a probe reports (orchestrator/fidelity/probes.py):
    # one may be slow when this test runs at nice 19 beside the host-timing tests (a CI run's first: 2.9 s)
    assert len(answer["rtt_ms"]) == 3 and all(r > 0 for r in answer["rtt_ms"]), answer
    assert statistics.median(answer["rtt_ms"]) < 1000, answer
    assert logged == [], logged
