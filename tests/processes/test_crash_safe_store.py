"""Crash-safe storing and `clean`'s salvage, on real files and real processes: a process SIGKILLed while it
gzips a log into the store leaves nothing at the log's name (only a temporary `clean` removes), salvage
stores a log again wherever the stored copy is cut short, damaged or older, and says what it could not
store; a run's lease is held while its orchestrator lives (not by a child it forked) and free once it
dies; and `peerlab clean` leaves a run alone that it has no lease for, whose state file it cannot read,
unless `--force` names it."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.record import host_state
from orchestrator.record import lease as leases
from orchestrator.record.salvage import salvage_logs
from orchestrator.store import FileStore
from orchestrator.store.durable import covers, write_private
from tests.support.cli import ROOT, peerlab

pytestmark = pytest.mark.slow


def node_log(path: Path, lines: int) -> Path:
    """A node's event log: JSON lines that do not repeat (gzip works on them as on a real log)."""
    with open(path, "w") as f:
        for i in range(lines):
            f.write(json.dumps({"ts": 1_700_000_000_000_000_000 + i * 7919, "node": path.stem, "type": "recv_rpc",
                                "peer": f"n{i % 97}", "bytes": 100 + i % 1013, "msgs": i % 3}) + "\n")
    return path


def lines_in(stored: Path) -> int:
    with gzip.open(stored, "rt") as f:
        return sum(1 for _ in f)


STORE_ONE = """
import sys
from pathlib import Path
from orchestrator.store import FileStore
FileStore(Path(sys.argv[1])).put_log("r1", "n0", Path(sys.argv[2]))
"""


def test_a_store_killed_mid_log_leaves_no_cut_log_and_salvage_stores_it_whole(tmp_path: Path):
    (tmp_path / "scratch").mkdir()
    log = node_log(tmp_path / "scratch" / "n0.jsonl", 400_000)   # 40 MB: gzipping it takes a while
    events = tmp_path / "runs" / "r1" / "events"
    proc = subprocess.Popen([sys.executable, "-c", STORE_ONE, str(tmp_path / "runs"), str(log)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (events.is_dir() and os.listdir(events)):   # the storing has begun: kill it there
        assert proc.poll() is None and time.monotonic() < deadline, "the store never began"
        time.sleep(0.0005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = sorted(os.listdir(events))
    assert len(left) == 1 and left[0].startswith(".n0.jsonl.gz.") and left[0].endswith(".tmp"), left

    saved = salvage_logs(str(tmp_path / "runs" / "r1"), [tmp_path / "scratch"])
    assert saved.complete and saved.stored == ["n0"], saved
    assert os.listdir(events) == ["n0.jsonl.gz"]            # the temporary gone
    assert lines_in(events / "n0.jsonl.gz") == 400_000 and covers(events / "n0.jsonl.gz", log)


def test_salvage_stores_again_a_stored_log_that_is_cut_damaged_or_older(tmp_path: Path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    logs = {n: node_log(scratch / f"{n}.jsonl", 20_000) for n in ("n0", "n1", "n2", "n3", "n4")}
    store = FileStore(tmp_path / "runs")
    for n, log in logs.items():
        store.put_log("r1", n, log)
    events = tmp_path / "runs" / "r1" / "events"
    whole = (events / "n1.jsonl.gz").read_bytes()
    (events / "n1.jsonl.gz").write_bytes(whole[:len(whole) // 3])   # cut short, as a kill left it in place
    damaged = bytearray((events / "n2.jsonl.gz").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF                               # a flipped byte: the CRC fails
    (events / "n2.jsonl.gz").write_bytes(bytes(damaged))
    with open(logs["n3"], "a") as f:                                 # the node wrote on after it was stored
        f.write(json.dumps({"ts": 1, "node": "n3", "type": "stop"}) + "\n")
    (events / "n4.jsonl.gz").unlink()                                # never stored
    assert [covers(events / f"{n}.jsonl.gz", logs[n]) for n in ("n0", "n1", "n2", "n3")] == [True, False, False, False]

    saved = salvage_logs(str(tmp_path / "runs" / "r1"), [scratch])
    assert saved.complete and saved.stored == ["n1", "n2", "n3", "n4"] and saved.covered == sorted(logs), saved
    for n, log in logs.items():
        assert covers(events / f"{n}.jsonl.gz", log)
    assert lines_in(events / "n3.jsonl.gz") == 20_001

    gone = salvage_logs(str(tmp_path / "runs" / "nowhere"), [scratch])  # no run directory: nothing is verified
    assert not gone.complete and gone.missing == sorted(logs) and "is gone" in gone.problem


def test_secrets_are_private_from_their_creation(tmp_path: Path):
    os.umask(0o022)
    path = tmp_path / "config.json"
    write_private(path, '{"token": "t"}')
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    write_private(path, '{"token": "u"}')                           # replaced whole, private again
    assert path.stat().st_mode & 0o777 == 0o600 and json.loads(path.read_text()) == {"token": "u"}


HOLD = """
import os, sys, time
from pathlib import Path
from orchestrator.record import lease
lease.take(Path(sys.argv[1]), "r-live")
child = os.fork()                      # as pyroute2 forks to enter a namespace
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def released(path: Path, claim: bool = False) -> leases.Lease:
    """The lease once the kernel has let go of it: a few milliseconds after its holder was reaped, as
    the last close of a dying process's files can finish after the parent's wait returned."""
    deadline = time.monotonic() + 2
    while (found := leases.check(path, claim)).state == "held" and time.monotonic() < deadline:
        time.sleep(0.01)
    return found


def test_a_lease_is_held_while_its_orchestrator_lives_and_free_once_it_dies(tmp_path: Path):
    path = tmp_path / "abc123.lease"
    assert leases.check(path).state == "none"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        held = leases.check(path)
        assert (held.state, held.pid, held.run_id, held.how) == ("held", proc.pid, "r-live", "lock")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        dead = released(path)   # its forked child lives on, and does not keep the lease
        assert (dead.state, dead.pid) == ("free", proc.pid)
        assert subprocess.run(["kill", "-0", str(child)]).returncode == 0
    finally:
        os.kill(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_find_runs_keeps_an_unreadable_state_file_whose_lease_is_held(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(host_state, "STATE_DIR", tmp_path)
    (tmp_path / "abc123.json").write_text('{"short": "abc1')          # caught half-written
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "abc123.lease")], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        (run,) = [r for r in host_state.find_runs() if r.short == "abc123"]
        assert run.unreadable and run.lease.state == "held"
        assert (tmp_path / "abc123.json").exists()
    finally:
        os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()
    assert released(tmp_path / "abc123.lease").state == "free"
    (run,) = [r for r in host_state.find_runs() if r.short == "abc123"]
    assert run.lease.state == "free"   # (and claimed by this process until forgotten)
    host_state.forget_run("abc123")
    assert not (tmp_path / "abc123.lease").exists()


def test_clean_leaves_a_run_without_a_lease_alone_unless_force_names_it():
    """/run/peerlab, as every root run uses it: a state file caught half-written, of a run of an older
    peerlab (no lease), stays; `--force <short>` cleans that run and no other."""
    state_dir = host_state.ROOT_STATE_DIR
    state_dir.mkdir(parents=True, exist_ok=True)
    half, other = state_dir / "00c1e1.json", state_dir / "00c1e2.json"
    half.write_text('{"short": "00c1e1", "run_')
    other.write_text('{"short": "00c1e2", "run_')
    try:
        result = peerlab("clean", timeout=120)
        assert result.returncode == 0, result.stderr
        out = " ".join(result.stderr.split())
        assert "run 00c1e1: a state file but no lease here" in out and "`peerlab clean --force 00c1e1`" in out
        assert half.exists() and other.exists()
        forced = peerlab("clean", "--force", "00c1e1", timeout=120)
        assert forced.returncode == 0, forced.stderr
        assert not half.exists() and other.exists()
    finally:
        half.unlink(missing_ok=True)
        other.unlink(missing_ok=True)
