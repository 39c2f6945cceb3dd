"""The documentation site builds with every link and anchor resolved, and its generated pages match
the code they describe."""
import subprocess
import sys

from orchestrator.tools import schema_docs
from tests.support.cli import ROOT, patient


def test_site_builds_strict_with_every_link_resolved(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=patient(120))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "extending" / "index.html").exists()


def test_scenario_reference_is_generated_from_the_current_schema():
    assert schema_docs.PAGE.read_text() == schema_docs.render(), "run make docs"


def test_no_page_points_outside_the_repository():
    for page in (ROOT / "docs").rglob("*.md"):
        assert "../shared" not in page.read_text() and "shared/seeds" not in page.read_text(), page
