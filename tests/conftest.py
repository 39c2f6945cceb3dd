"""Shared fixtures. Markers: `emulation` (root, namespaces, tc, real processes), `spark` (Java),
`slow`. The fast loop is `pytest -m "not emulation and not spark"`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def pytest_collection_modifyitems(config, items):
    # The emulation needs root; CI runs as root, so there these never skip.
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="emulation tests need root (network namespaces, tc)")
        for item in items:
            if "emulation" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def spark():
    if not shutil.which("java"):
        pytest.fail("Java is required for the analysis tests (the README's setup installs it)")
    from analysis.spark import get_spark

    session = get_spark("local[2]")
    yield session
    session.stop()


def peerlab(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=kwargs.pop("cwd", ROOT), **kwargs)


def run_netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("pl")}


@pytest.fixture(scope="session")
def docker_engine():
    """The local Docker engine. CI (PEERLAB_REQUIRE_DOCKER=1, set by .ci/run after .ci/docker) fails
    without one; elsewhere the docker tests skip, saying how to get one."""
    from orchestrator.backends.docker import docker_client

    try:
        return docker_client()
    except RuntimeError as err:
        if os.environ.get("PEERLAB_REQUIRE_DOCKER") == "1":
            pytest.fail(str(err))
        pytest.skip(f"{err} (.ci/docker installs and starts one)")


def docker_objects(client) -> list[str]:
    """Names of every container, network and volume a peerlab run labelled."""
    label = {"label": "peerlab.run"}
    return sorted([c.name for c in client.containers.list(all=True, filters=label)] +
                  [n.name for n in client.networks.list(filters=label)] +
                  [v.name for v in client.volumes.list(filters=label)])
