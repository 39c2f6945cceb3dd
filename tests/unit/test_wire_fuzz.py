"""Every wire decoder survives malformed frames (the short version of `peerlab fuzz`), and what
fuzzing found stays fixed."""
from __future__ import annotations

import subprocess
import sys

import pytest

from node import wire_fuzz as fuzz
from node.protocols.pubsub import wire
from tests.support.cli import ROOT


@pytest.mark.parametrize("name", fuzz.targets())
def test_decoder_survives_malformed_frames(name: str, capsys):
    fuzz.run_hypothesis(name, 400)
    line = capsys.readouterr().out.strip().splitlines()[0]
    assert line == f"decoder={name} frames=400 crashes=0 engine=hypothesis"


def test_a_crashing_decoder_is_counted(monkeypatch, capsys):
    def fragile(data: bytes) -> None:
        if len(data) > 3:
            raise IndexError("boom")
    monkeypatch.setattr(fuzz, "make_target", lambda name: fragile)
    fuzz.run_hypothesis("fragile", 200)
    out = capsys.readouterr()
    crashes = int(out.out.split("crashes=")[1].split()[0])
    assert crashes > 0 and "IndexError: boom" in out.err


def test_topic_names_that_are_not_utf8_are_refused():
    # found by fuzzing: proto2 hands out bytes for such strings and the event log refused them
    rpc = wire.RPC()
    rpc.publish.add(topic="t0", data=b"x")
    raw = wire.encode_rpc(rpc).replace(b"t0", b"\xff\xfe")
    with pytest.raises(wire.DecodeError, match="UTF-8"):
        wire.decode_rpc(raw)


@pytest.mark.slow
def test_cli_prints_one_line_per_decoder_and_exits_0():
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "fuzz", "--frames", "300", "--decoder", "frame",
                          "--decoder", "core:gossipsub", "--engine", "hypothesis"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["decoder=frame frames=300 crashes=0 engine=hypothesis",
                                       "decoder=core:gossipsub frames=300 crashes=0 engine=hypothesis"]
