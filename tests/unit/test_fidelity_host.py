"""Reading the host's CPU from /proc (fixtures of /proc/stat and /proc/pressure/cpu, with and
without PSI) and the sample between two readings."""
from pathlib import Path

import pytest

from orchestrator.fidelity import host

STAT = """cpu  {user} 0 {system} {idle} 100 0 10 {steal} 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
intr 417919 0 0
ctxt 699218
btime 1795718204
processes 4670
procs_running {running}
procs_blocked 0
"""
PSI = """some avg10={avg10} avg60=2.29 avg300=1.40 total={total}
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""


def _proc(tmp_path: Path, name: str, *, user, system, idle, steal, running, psi=None) -> Path:
    proc = tmp_path / name
    proc.mkdir()
    (proc / "stat").write_text(STAT.format(user=user, system=system, idle=idle, steal=steal, running=running))
    if psi is not None:
        (proc / "pressure").mkdir()
        (proc / "pressure" / "cpu").write_text(PSI.format(avg10=psi[0], total=psi[1]))
    return proc


def test_parse_stat_and_psi():
    jiffies, running = host.parse_stat(STAT.format(user=10, system=5, idle=85, steal=2, running=3))
    assert jiffies == {"user": 10, "nice": 0, "system": 5, "idle": 85, "iowait": 100, "irq": 0, "softirq": 10,
                       "steal": 2}
    assert running == 3
    assert host.parse_psi(PSI.format(avg10=3.78, total=8344871)) == (3.78, 8344871)
    with pytest.raises(ValueError):
        host.parse_stat("intr 1 2 3\n")


def test_sample_between_two_readings(tmp_path):
    a = host.read(10.0, _proc(tmp_path, "a", user=1000, system=500, idle=8000, steal=0, running=1,
                              psi=(1.0, 1_000_000)))
    # one second later: 150 of 200 jiffies busy (10 of them stolen), 5 runnable, 0.4 s stalled
    b = host.read(11.0, _proc(tmp_path, "b", user=1100, system=540, idle=8050, steal=10, running=5,
                              psi=(30.5, 1_400_000)))
    s = host.sample(a, b, ncores=2)
    assert s.busy == pytest.approx(150 / 200)
    assert s.steal == pytest.approx(10 / 200)
    assert s.runnable_per_core == 2.0  # the reader itself is not counted
    assert s.psi_some_pct == pytest.approx(40.0)
    assert s.psi_some_avg10 == 30.5


def test_no_psi_is_said_not_failed(tmp_path):
    a = host.read(0.0, _proc(tmp_path, "a", user=0, system=0, idle=0, steal=0, running=1))
    b = host.read(1.0, _proc(tmp_path, "b", user=100, system=0, idle=100, steal=0, running=1))
    assert not host.has_psi(tmp_path / "a")
    s = host.sample(a, b, ncores=2)
    assert s.psi_some_pct is None and s.psi_some_avg10 is None and s.busy == pytest.approx(0.5)


def test_this_machine_reads():
    snap = host.read(0.0)
    assert snap.procs_running >= 1 and sum(snap.jiffies.values()) > 0
    assert host.cores() >= 1


def test_the_run_queue_as_a_mean_of_readings(tmp_path):
    a = host.read(0.0, _proc(tmp_path, "a", user=0, system=0, idle=0, steal=0, running=9))
    b = host.read(1.0, _proc(tmp_path, "b", user=100, system=0, idle=100, steal=0, running=9), mean_running=2.5)
    assert host.sample(a, b, ncores=2).runnable_per_core == 0.75  # the one reading of 9 is not used
    assert host.running(tmp_path / "b") == 9
