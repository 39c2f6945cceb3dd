"""Shared fixtures and the tests' order. Markers: `emulation` (root, namespaces, tc, real processes),
`netem` (sch_netem), `spark` (Java), `docker`, `slow`, `waiting` (started first), `exclusive` (one at
a time after the emulation tests, with the tests that need only the CPU beside them at the lowest
priority), `whole_machine` (exclusive, with nothing beside it). `make test-fast` is the fast loop;
`make test` everything, with --no-skips: there a test that skips fails."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.support.cli import ROOT, SHARED, docker_objects, peerlab, run_netns  # noqa: F401 - shared


def pytest_addoption(parser):
    parser.addoption("--no-skips", action="store_true",
                     help="a test that skips fails instead, saying why it skipped (make test, and so CI: "
                          "a missing engine, user or data set must not pass as a green run)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and item.config.getoption("--no-skips"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"{reason}\n(this test skipped, and --no-skips makes a skip a failure: `make test` "
                           "runs every test; run pytest without it to allow skips)")


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
def s3_server(tmp_path_factory):
    """The bundled S3 server (SeaweedFS, orchestrator/store/s3server.py) on loopback, with a bucket
    `peerlab`, for the whole session."""
    from orchestrator.store.s3server import S3Server

    with S3Server(tmp_path_factory.mktemp("s3server"), "peerlab-test", "peerlab-test-secret") as server:
        yield server


@pytest.fixture(scope="session")
def s3_endpoint(s3_server, tmp_path_factory):
    """A boto3 client of the real S3 server; the AWS_* variables pointing at it, for this process and
    the CLIs it starts."""
    from analysis import s3a

    jars = s3a.jar_dir()  # the s3a jars set-up fetched (a 686 MB download): the tests' caches link them, not fetch them again
    cache = tmp_path_factory.mktemp("s3cache")
    if jars.is_dir():
        (cache / "jars").symlink_to(jars.resolve())
    env = {**s3_server.env(), "PEERLAB_CACHE": str(cache)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield s3_server.client()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
