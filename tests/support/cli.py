"""What tests share: where the checkout is, the real CLI in a subprocess, and what runs leave
behind (network namespaces, Docker objects)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


# The tests that `make test` runs beside the exclusive phase run at the lowest CPU priority (.ci/beside
# sets this): while a foreground run holds both cores they get about 1.5% of one, and a step of 30 s
# can take minutes. Their wall-clock timeouts are there to catch hangs, not slowness, so they stretch
# by this factor.
TIME_SCALE = float(os.environ.get("PEERLAB_TEST_TIME_SCALE") or 1)


def patient(seconds: float) -> float:
    """A wall-clock timeout for a hang, stretched for a test that may be starved of CPU (TIME_SCALE)."""
    return seconds * TIME_SCALE


def peerlab(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would (`timeout` stretched by TIME_SCALE)."""
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          timeout=patient(timeout), cwd=kwargs.pop("cwd", ROOT), **kwargs)


def cache_with_jars(path: Path) -> Path:
    """A peerlab cache at `path` that holds nothing of any run (what a report needs is staged from the
    store) and set-up's s3a jars, linked: a report with it fetches nothing from Maven Central."""
    from analysis import s3a

    jars = s3a.jar_dir().resolve()
    if not jars.is_dir():
        import pytest

        pytest.fail(f"the s3a jars are missing ({jars}): make s3a-jars")
    path.mkdir(parents=True)
    (path / "jars").symlink_to(jars)
    return path


def run_netns(*run_dirs: Path | str) -> set[str]:
    """peerlab's network namespaces on this machine; given run directories, only those runs' (their
    names carry the run's short id, the run directory's last part), so a test that runs beside
    others checks its own leftovers."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in out.splitlines() if line.startswith("pl")}
    if run_dirs:
        prefixes = tuple(f"pl{short_id(d)}-" for d in run_dirs)
        names = {n for n in names if n.startswith(prefixes)}
    return names


def run_processes(short: str) -> list[str]:
    """Processes of the run with this short id (the fork server and its node children carry the
    run's scratch directory, /tmp/peerlab/<short>, on their command line; its delay line and shaper
    name it as well)."""
    out = subprocess.run(["pgrep", "-af", f"/peerlab/{short}"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def run_leftovers(run_dir: Path | str) -> dict[str, object]:
    """What a run that ended (however) must not leave: its namespaces, processes, scratch directory,
    state file and lease (empty values: nothing left)."""
    from orchestrator.record.host_state import STATE_DIR

    short = short_id(run_dir)
    return {k: v for k, v in {
        "netns": sorted(run_netns(run_dir)), "processes": run_processes(short),
        "scratch": Path(f"/tmp/peerlab/{short}").exists(), "state file": (STATE_DIR / f"{short}.json").exists(),
        "lease": (STATE_DIR / f"{short}.lease").exists(),
    }.items() if v}


def short_id(run_dir: Path | str) -> str:
    """A run's short id: its directory's last part, which names its namespaces and processes' paths."""
    return Path(run_dir).name.rsplit("-", 1)[-1]


def docker_objects(client) -> list[str]:
    """Names of every container, network and volume a peerlab run labelled."""
    label = {"label": "peerlab.run"}
    # (ignore_removed: one removed between the engine's list and its inspect was not there)
    return sorted([c.name for c in client.containers.list(all=True, filters=label, ignore_removed=True)] +
                  [n.name for n in client.networks.list(filters=label)] +
                  [v.name for v in client.volumes.list(filters=label)])
