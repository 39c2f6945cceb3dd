"""`make test` brings the local cluster up beside the emulation tests (tests/cluster/ahead.py): the
cluster's fixture takes it only if the up succeeded, and a failed command or up leaves no cluster
behind. The CLI here is a stand-in that records what it is asked and, for `cluster up`, takes its time
and may fail, as the real one may; `cluster down` is asked whatever state the up reached."""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from tests.cluster import ahead

FAKE_CLI = """
import json, os, sys, time
with open(os.environ["CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["cluster", "up"]:
    with open(os.environ["CALLS"] + ".pid", "w") as f:
        f.write(str(os.getpid()))
    print("creating the kind cluster peerlab", flush=True)
    time.sleep(float(os.environ["UP_S"]))
    if os.environ["UP_CODE"] != "0":
        print("cluster up: nodes not Ready after 180 s", flush=True)
    sys.exit(int(os.environ["UP_CODE"]))
"""


@pytest.fixture
def cli(tmp_path, monkeypatch):
    script = tmp_path / "fake_cli.py"
    script.write_text(FAKE_CLI)
    calls = tmp_path / "calls"
    monkeypatch.setattr(ahead, "CLI", [sys.executable, str(script)])
    monkeypatch.setattr(ahead, "host_state", lambda: {"link lo", "netns before"})
    monkeypatch.setattr(ahead, "_namespaces_in_use", lambda: None)  # (root's: a namespace made and removed)
    monkeypatch.setenv("CALLS", str(calls))
    handler = signal.getsignal(signal.SIGTERM)
    yield lambda: [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    signal.signal(signal.SIGTERM, handler)  # main() sets its own


def alive(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_cluster_up_beside_a_passing_command_is_handed_to_the_fixture(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UP_S", "0.5")
    monkeypatch.setenv("UP_CODE", "0")
    where = tmp_path / "ahead"
    assert ahead.main([sys.executable, "-c", "pass"], where) == 0
    assert cli() == [["image", "build", "--orchestrator"], ["cluster", "up", "--nodes", "3"]]  # no down
    assert ahead.taken(where) == {"link lo", "netns before"}  # the state from before the up
    assert not where.exists()


def test_a_failed_command_takes_the_cluster_down_while_it_is_still_coming_up(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UP_S", "30")
    monkeypatch.setenv("UP_CODE", "0")
    where = tmp_path / "ahead"
    up_pid = Path(str(tmp_path / "calls") + ".pid")
    fails_once_up = (f"import os, sys, time\nfor _ in range(600):\n    if os.path.exists({str(up_pid)!r}): sys.exit(3)\n"
                     "    time.sleep(0.1)")
    assert ahead.main([sys.executable, "-c", fails_once_up], where) == 3
    assert cli()[-1] == ["cluster", "down"]
    assert not alive(up_pid)  # the up stopped, not left running
    assert not where.exists()


def test_a_failed_up_fails_the_step_and_leaves_nothing_for_the_fixture(cli, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("UP_S", "0.2")
    monkeypatch.setenv("UP_CODE", "1")
    where = tmp_path / "ahead"
    assert ahead.main([sys.executable, "-c", "pass"], where) == 1
    assert cli()[-1] == ["cluster", "down"]
    assert "nodes not Ready after 180 s" in capfd.readouterr().err  # the up's own words, shown
    assert not where.exists()  # nothing for the fixture to take


def test_a_command_ended_by_a_signal_says_so_as_a_shell_does(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("UP_S", "30")
    monkeypatch.setenv("UP_CODE", "0")
    where = tmp_path / "ahead"
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert ahead.main([sys.executable, "-c", killed], where) == 128 + signal.SIGTERM
    assert cli()[-1] == ["cluster", "down"] and not where.exists()


def test_a_failed_down_is_said_and_fails_the_step(cli, tmp_path, monkeypatch, capfd):
    script = Path(ahead.CLI[1])
    script.write_text(script.read_text() + "if sys.argv[1:3] == ['cluster', 'down']:\n"
                      "    print('kind delete cluster: exit status 1', file=sys.stderr)\n    sys.exit(1)\n")
    where = tmp_path / "ahead"
    where.mkdir()
    assert ahead.main(["--down"], where) == 1
    assert "kind delete cluster: exit status 1" in capfd.readouterr().err and not where.exists()


def test_the_fixture_refuses_a_cluster_whose_up_failed(tmp_path):
    where = tmp_path / "ahead"
    where.mkdir()
    (where / "host-before.json").write_text(json.dumps(["link lo"]))
    (where / "up.log").write_text("kind create cluster: exit status 1\n")
    (where / "up.status").write_text("1 41\n")
    with pytest.raises(AssertionError, match=r"status 1\)[\s\S]*kind create cluster: exit status 1"):
        ahead.taken(where)
    assert not where.exists()
