"""The run's memory (orchestrator/run/memory_watch.py): real processes' PSS, their descendants
included and each counted once, its peak kept after they are gone."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from orchestrator.procfs import memory_kib, tree
from orchestrator.run.memory_watch import MemoryWatch, occupied


def occupied_kib(roots) -> int:
    """The PSS of every process in the trees under `roots` (KiB)."""
    return occupied(roots)[0]


HOLD = """
import sys, time
block = bytearray({mib} << 20)
block[::4096] = b"x" * len(block[::4096])  # touched: resident, not only reserved
print("held", flush=True)
time.sleep(30)
"""


def _hold(mib: int, parent_of: int = 0) -> subprocess.Popen:
    """A process holding `mib` MiB; with `parent_of`, a shell holding a child that holds them."""
    code = HOLD.format(mib=mib)
    argv = [sys.executable, "-c", code]
    if parent_of:
        argv = ["sh", "-c", f'"{sys.executable}" -c \'{code}\'; sleep 30']
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_tree_counts_its_descendants_once_and_sees_what_they_hold():
    before = occupied_kib([os.getpid()])
    holder = _hold(48, parent_of=1)  # sh -> python: a grandchild
    try:
        assert holder.pid in tree(os.getpid()) and len(tree(holder.pid)) == 2
        grown = occupied_kib([os.getpid()]) - before
        assert 48 * 1024 <= grown < 80 * 1024, grown
        # named twice (as a root and inside the tree of another): counted once
        assert occupied_kib([os.getpid(), holder.pid]) - before < 80 * 1024
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_the_peak_stays_after_the_processes_go():
    watch = MemoryWatch()
    watch.start()
    holder = _hold(64)
    try:
        rss, pss = memory_kib(holder.pid)
        assert rss >= 64 * 1024 and pss >= 64 * 1024
        deadline = time.monotonic() + 15
        while watch.peak_kib < occupied_kib([os.getpid()]) - 8 * 1024:  # sampled with the holder up
            assert time.monotonic() < deadline, "no sample saw the holder"
            time.sleep(0.2)
    finally:
        holder.kill()
        holder.wait()
    peak = watch.finish()
    assert peak is not None and peak * 1024 >= occupied_kib([os.getpid()]) + 60 * 1024
    assert not watch.is_alive()


def test_processes_outside_the_tree_count_through_others(tmp_path):
    """A process whose parent is gone (as a container's, whose parent is the engine's shim) is not in
    the orchestrator's tree: `others` brings it in."""
    script, out = tmp_path / "hold.py", tmp_path / "out"
    script.write_text(HOLD.format(mib=32))
    started = subprocess.run(["sh", "-c", f'"{sys.executable}" {script} > {out} 2>&1 & echo $!'],
                             capture_output=True, text=True, check=True)  # the shell exits: orphaned
    pid = int(started.stdout)
    try:
        deadline = time.monotonic() + 15
        while "held" not in out.read_text():
            assert time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        assert pid not in tree(os.getpid())
        alone, with_it = MemoryWatch(), MemoryWatch(others=lambda: [pid])
        alone.sample()
        with_it.sample()
        assert with_it.peak_kib - alone.peak_kib >= 32 * 1024
    finally:
        os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while memory_kib(pid) != (0, 0):  # gone (reaped by init): nothing, not an error
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_probe_processes_are_counted_apart_and_the_drain_end_sample_is_kept():
    """What the bench tells apart (orchestrator/tools/bench_admission.py): the probes beside adapter
    nodes, known by the mark in their command line, in the peak's sample; and the runner's sample as
    the drain ends."""
    from orchestrator.fidelity.netprobe import PROBE_MARK

    plain = _hold(16)
    marked = subprocess.Popen([sys.executable, "-c", f"# {PROBE_MARK} test\n" + HOLD.format(mib=24)],
                              stdout=subprocess.PIPE, text=True)
    assert marked.stdout.readline() == "held\n"
    try:
        watch = MemoryWatch()
        watch.sample(drain_end=True)
        total, probes_kib, probes = occupied([os.getpid()])
        assert probes == 1 and 24 * 1024 <= probes_kib < 40 * 1024, (probes, probes_kib)
        assert total >= probes_kib + 16 * 1024
        got = watch.breakdown()
        assert got["probes_at_peak"]["processes"] == 1 and got["probes_at_peak"]["mib"] >= 24
        assert got["drain_end_mib"] == pytest.approx(watch.peak_kib / 1024, abs=0.1)
    finally:
        for proc in (plain, marked):
            proc.kill()
            proc.wait()
    watch.sample()  # later, smaller: neither the peak's probes nor the drain's end move
    assert watch.breakdown() == got
