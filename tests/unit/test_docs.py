"""The documentation site builds with every link and anchor resolved, and its generated pages match
the code they describe; the results page holds each headline figure once, with its command, date and
commit."""
import re
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


def results_rows() -> list[list[str]]:
    """Every row of the results page's tables, split into cells (a `|` inside backticks is no border)."""
    rows = []
    for line in (ROOT / "docs" / "results.md").read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| figure |") or line.startswith("| ---"):
            continue
        cells, cell, quoted = [], "", False
        for ch in line.strip()[1:-1]:
            if ch == "`":
                quoted = not quoted
            if ch == "|" and not quoted:
                cells.append(cell.strip())
                cell = ""
            else:
                cell += ch
        rows.append(cells + [cell.strip()])
    return rows


def test_results_hold_each_figure_once_with_its_command_date_and_commit():
    rows = results_rows()
    assert len(rows) >= 30
    for row in rows:
        assert len(row) == 5, row  # figure | value | command | date | commit
        figure, value, command, date, commit = row
        assert figure and value and ("`" in command or command.startswith("as ")), row  # "as above"
        assert re.match(r"\d{4}-\d{2}-\d{2}( |$)", date), row
        assert re.match(r"[0-9a-f]{7,40}( |$)", commit) or commit == "before this page", row
    figures = [row[0] for row in rows]
    assert len(figures) == len(set(figures)), "a figure twice in docs/results.md"
