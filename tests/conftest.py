"""Shared fixtures and the tests' order. Markers: `emulation` (root, namespaces, tc, real processes),
`netem` (sch_netem), `spark` (Java), `docker`, `slow`, `waiting` (started first), `exclusive` (one at
a time after the emulation tests, with the tests that need only the CPU beside them at the lowest
priority), `whole_machine` (exclusive, with nothing beside it). `make test-fast` is the fast loop;
`make test` everything."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.support.cli import ROOT, SHARED, docker_objects, peerlab, run_netns  # noqa: F401 - shared


def pytest_collection_modifyitems(config, items):
    # Slow tests first: with several workers (make test) the long runs start at once and the short
    # tests fill the gaps at the end, instead of one long run finishing alone. Before them the long
    # runs that mostly wait: started at once, they overlap the CPU-bound tests instead of ending the
    # phase alone on an idle machine (the short soak did, for two minutes).
    items.sort(key=lambda item: tuple(mark not in item.keywords
                                      for mark in ("waiting", "emulation", "slow", "spark")))
    # The emulation needs root; CI runs as root, so there these never skip.
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="emulation tests need root (network namespaces, tc)")
        for item in items:
            if "emulation" in item.keywords:
                item.add_marker(skip)
    # netem tests on a kernel without sch_netem: `make test` runs them in the guest instead (test-netem)
    elif any("netem" in item.keywords for item in items):
        from orchestrator.shaping import probe_netem

        has_netem, why = probe_netem()
        if not has_netem:
            skip = pytest.mark.skip(reason=f"{why}: `make test-netem` runs these in a Debian guest")
            for item in items:
                if "netem" in item.keywords:
                    item.add_marker(skip)


@pytest.fixture(scope="session")
def spark():
    if not shutil.which("java"):
        pytest.fail("Java is required for the analysis tests (the README's setup installs it)")
    from analysis.spark import get_spark

    session = get_spark("local[2]", input_bytes=0)  # test data is small: the quick JIT tier only
    yield session
    session.stop()


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


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """A real S3 HTTP endpoint (moto's server mode in a subprocess) with a bucket `peerlab`; the
    AWS_* variables pointing at it, for this process and the CLIs it starts."""
    import socket
    import time

    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "peerlab-test",
           "AWS_SECRET_ACCESS_KEY": "peerlab-test-secret", "AWS_DEFAULT_REGION": "us-east-1",
           "PEERLAB_CACHE": str(tmp_path_factory.mktemp("s3cache"))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = boto3.client("s3")
        for _ in range(100):
            try:
                client.create_bucket(Bucket="peerlab")
                break
            except Exception:
                time.sleep(0.1)
        else:
            pytest.fail("moto's S3 server did not start")
        yield client
    finally:
        server.terminate()
        server.wait(10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
