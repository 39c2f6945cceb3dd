"""The documentation site builds with every link and anchor resolved, and its generated pages match
the code they describe; the results page holds each headline figure once, with its command, date and
commit, and no other page holds a date or a commit hash (issue 65: the others link there and say why)."""
import re
import subprocess
import sys

from orchestrator.tools import schema_docs
from tests.support.cli import ROOT, patient
from tests.unit.test_readme import offences


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


def dated_pages(docs) -> dict[str, list[str]]:
    """Every page under `docs` but the results page that holds a date or a commit hash, with what it
    holds (`offences`, the README's check)."""
    found = {}
    for page in sorted(docs.rglob("*.md")):
        if page != docs / "results.md" and (what := offences(page.read_text())):
            found[str(page.relative_to(docs))] = what
    return found


def test_no_page_but_results_holds_a_date_or_a_commit_hash():
    found = dated_pages(ROOT / "docs")
    assert found == {}, ("dated figures go to docs/results.md (a row: figure, value, command, date, commit), "
                         "history to CHANGELOG.md; the page links to the row: "
                         + "; ".join(f"docs/{page}: {', '.join(what)}" for page, what in found.items()))


def test_the_pages_check_names_each_page_and_what_it_holds(tmp_path):
    (tmp_path / "protocols").mkdir()
    (tmp_path / "results.md").write_text("| a figure | 1 s | `make it` | 2026-11-28 | before this page |\n")
    (tmp_path / "why.md").write_text("Why it is fast: [results](results.md#a-figure).\n")
    (tmp_path / "shaping.md").write_text("measured on 2026-11-26, 162 ms\n")
    (tmp_path / "protocols" / "gossipsub.md").write_text("the Python line (at 5de0bf4)\n")
    assert dated_pages(tmp_path) == {"protocols/gossipsub.md": ["commit hash 5de0bf4"],
                                     "shaping.md": ["date 2026-11-26"]}
