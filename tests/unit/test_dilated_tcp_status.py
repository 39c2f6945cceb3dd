"""What `peerlab doctor` says of peerlab_cubic (orchestrator/shaping/dilated_cubic.status): the tools
it lacks, not built yet, built; and that asking builds, installs and registers nothing."""
import os
import shutil
from pathlib import Path

import pytest

from orchestrator.shaping import dilated_cubic
from orchestrator.tools import doctor

needs_tools = pytest.mark.skipif(not (shutil.which("clang") and shutil.which("bpftool")),
                                 reason="clang and bpftool (make dev installs them)")


def test_without_its_tools_doctor_names_them_and_what_dilated_runs_keep(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no clang, no bpftool on it
    ok, why = dilated_cubic.status()
    assert not ok
    assert "clang" in why and "bpftool" in why and "kernel's cubic" in why


@needs_tools
def test_it_reads_not_built_then_built_and_asking_builds_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path))
    ok, why = dilated_cubic.status()
    assert ok and why.startswith("not built yet"), why
    assert not any(Path(tmp_path).rglob("*.o")), "doctor built the object"
    built = dilated_cubic.object_path()
    ok, why = dilated_cubic.status()
    assert ok and str(built) in why and why.startswith("built")


@needs_tools
@pytest.mark.skipif(os.geteuid() != 0, reason="doctor checks shaping only as root")
def test_doctor_lists_it_among_the_shaping_rows(monkeypatch, tmp_path):
    monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path))
    rows = {row["what"]: row for row in doctor.checks()}
    row = rows["peerlab_cubic (a dilated run's TCP)"]
    assert row["ok"] and "not built yet" in row["detail"]
