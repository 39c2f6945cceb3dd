"""`peerlab prepare`: the playbooks, run through ansible-runner against this machine. The host
playbook in check mode (it would change the host); the storage playbook for real against an S3
endpoint; the kind playbook's syntax (no kind cluster can run here; .github/workflows/kind.yml runs it)."""
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.tools.prepare import PLAYBOOKS, prepare
from tests.support.cli import patient, peerlab

pytestmark = [pytest.mark.slow]


def test_host_playbook_check_mode_changes_nothing():
    written = [Path("/etc/sysctl.d/90-peerlab.conf"), Path("/etc/security/limits.d/90-peerlab.conf")]
    existed = [p.exists() for p in written]
    rc, stats = prepare("host", check=True, quiet=True)
    assert rc == 0
    assert not stats.get("failures") and not stats.get("dark"), stats
    assert "localhost" in stats["ok"]
    assert [p.exists() for p in written] == existed  # check mode wrote nothing


def test_storage_playbook_creates_the_bucket(s3_endpoint):
    rc, stats = prepare("storage", extravars={"peerlab_bucket": "made-by-ansible"}, quiet=True)
    assert rc == 0, stats
    assert "made-by-ansible" in [b["Name"] for b in s3_endpoint.list_buckets()["Buckets"]]
    rc, stats = prepare("storage", extravars={"peerlab_bucket": "made-by-ansible"}, quiet=True)
    assert rc == 0 and not stats.get("changed"), stats  # idempotent: the second run changes nothing


@pytest.mark.parametrize("name", sorted(PLAYBOOKS))
def test_playbook_syntax(name):
    playbook = Path(sys.executable).parent / "ansible-playbook"
    result = subprocess.run([str(playbook), "--syntax-check", "-i", "localhost,", str(PLAYBOOKS[name])],
                            capture_output=True, text=True, timeout=patient(120))
    assert result.returncode == 0, result.stdout + result.stderr


def test_prepare_cli_rejects_an_unknown_playbook():
    result = peerlab("prepare", "cluster", timeout=60)
    assert result.returncode == 2 and "invalid choice" in result.stderr
