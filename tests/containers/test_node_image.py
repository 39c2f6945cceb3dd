"""The node image's recipe, without an engine: what it installs stays within peerlab's dependencies,
and its tag follows its content and base."""
import re
import shutil
import tomllib
import uuid

import pytest

from orchestrator.builds import node_image as image
from tests.support.cli import ROOT


def _name(requirement: str) -> str:
    return requirement.split(">")[0].split("=")[0].split("<")[0].strip().lower()


def test_image_requirements_are_pinned_as_in_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = [line.strip() for line in (ROOT / "node" / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert wanted and set(wanted) <= set(deps), set(wanted) - set(deps)
    assert {_name(r) for r in wanted} >= {"pydantic", "pyroute2", "aiohttp", "protobuf"}
    in_cluster = [line.strip() for line in (ROOT / "orchestrator" / "requirements-in-cluster.txt").read_text()
                  .splitlines() if line.strip() and not line.startswith("#")]
    assert in_cluster and set(in_cluster) <= set(deps), set(in_cluster) - set(deps)
    assert {_name(r) for r in in_cluster} >= {"kubernetes", "pyyaml", "boto3", "numpy"}


def test_tag_follows_content_and_base(monkeypatch, tmp_path):
    """On a copy of what the image holds (the checkout is left alone)."""
    ignore = shutil.ignore_patterns("__pycache__", "node_modules")
    shutil.copytree(ROOT / "node", tmp_path / "node", ignore=ignore, symlinks=True)
    shutil.copytree(ROOT / "orchestrator" / "shaping", tmp_path / "orchestrator" / "shaping", ignore=ignore)
    shutil.copy(ROOT / "orchestrator" / "__init__.py", tmp_path / "orchestrator" / "__init__.py")
    monkeypatch.setattr(image, "ROOT", tmp_path)
    tag = image.image_tag("python:3.12-slim")
    assert tag.startswith("peerlab-node:") and tag == image.image_tag("python:3.12-slim")
    assert image.image_tag("peerlab-base:bookworm") != tag
    (tmp_path / "node" / "zz_tag_probe.py").write_text("# changes the node\n")
    assert image.image_tag("python:3.12-slim") != tag
    (tmp_path / "node" / "zz_tag_probe.py").unlink()
    assert image.image_tag("python:3.12-slim") == tag
    (tmp_path / "orchestrator" / "shaping" / "delayline.py").write_text("# the shaper changed\n")
    assert image.image_tag("python:3.12-slim") != tag  # the delay line is in the image too
    monkeypatch.setenv("PEERLAB_BASE_IMAGE", "peerlab-base:bookworm")
    assert image.base_image() == "peerlab-base:bookworm"


@pytest.mark.docker
@pytest.mark.slow
def test_a_failed_build_says_why_and_leaves_no_container(docker_engine, tmp_path):
    """The one `docker build` of the images made from a context (orchestrator, Spark, shaping daemon,
    S3 store): a step that fails is named (its command and exit code), and the step's container is
    removed with it (the legacy builder keeps it otherwise: one stopped container per failed build;
    BuildKit makes none)."""
    base = image.base_image()
    if not image.present(docker_engine, base):
        base = "peerlab-base:bookworm"
    # the step's container is found by its command: the tests beside this one make containers too
    step = f"the step that fails, {uuid.uuid4().hex}"
    (tmp_path / "Dockerfile").write_text(f"FROM {base}\nRUN echo {step} >&2 && exit 3\n")
    failed = image.build_context("peerlab-test-failing:1", tmp_path)
    assert step in failed and re.search(r"(non-zero code|exit code): 3\b", failed), failed
    left = [c.id for c in docker_engine.containers.list(all=True, sparse=True)  # no inspect: a neighbour's
            if step in c.attrs.get("Command", "")]  # container removed meanwhile raises nothing
    assert left == [], left
    (tmp_path / "Dockerfile").write_text(f"FROM {base}\nRUN true\n")
    assert image.build_context("peerlab-test-built:1", tmp_path) == ""
    docker_engine.images.remove("peerlab-test-built:1")
