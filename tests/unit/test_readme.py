"""The README is the front door (issue 65): at most 10 KB, no date and no commit hash in it (dated
figures live in docs/results.md, history in CHANGELOG.md), the two commands CI relies on, and every
relative link resolving, the changelog's too (mkdocs --strict checks docs/ only)."""
import re
import subprocess

import pytest
from markdown.extensions.toc import slugify

from tests.support.cli import ROOT

README = ROOT / "README.md"
LIMIT = 10 * 1024  # bytes

DATE = re.compile(r"(?<![0-9])[0-9]{4}-[0-9]{2}-[0-9]{2}(?![0-9])")
HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")


def git_commits(names: set[str]) -> set[str]:
    """Those of `names` that this repository resolves to a commit (an abbreviated hash two objects
    share counts: it still names a commit)."""
    if not names:
        return set()
    done = subprocess.run(["git", "-C", str(ROOT), "cat-file", "--batch-check"], capture_output=True,
                          text=True, check=True, input="".join(f"{n}^{{commit}}\n" for n in sorted(names)))
    found = set()
    for name, line in zip(sorted(names), done.stdout.splitlines()):
        if line.endswith(" commit") or " commit " in line or line.endswith("ambiguous"):
            found.add(name)
    return found


def offences(text: str) -> list[str]:
    """Every date (YYYY-MM-DD) and every commit hash in `text`: a 7-40 character hex word that is a
    commit of this repository, or that mixes digits and letters as only a hash does (so a shallow
    clone, which knows few commits, still catches one)."""
    found = [f"date {m.group()}" for m in DATE.finditer(text)]
    words = {m.group() for m in HEX.finditer(text)}
    hashlike = {w for w in words if re.search(r"[0-9]", w) and re.search(r"[a-f]", w)}
    found += [f"commit hash {w}" for w in sorted(git_commits(words) | hashlike)]
    return found


def test_readme_is_at_most_10_kb():
    size = len(README.read_bytes())
    assert size <= LIMIT, f"README.md is {size} bytes, over {LIMIT}: move detail to docs/, figures to docs/results.md"


def test_readme_holds_no_date_and_no_commit_hash():
    assert offences(README.read_text()) == [], "dated figures go to docs/results.md, history to CHANGELOG.md"


def test_the_check_finds_dates_and_commits_in_a_text_that_has_them():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    text = (f"51 s (2026-11-27; at {head[:7]}, again at {head}), a run of 20261121-201513, "
            "a decade of 1234567 effaced bytes")
    assert offences(text) == ["date 2026-11-27", f"commit hash {head[:7]}", f"commit hash {head}"]
    assert offences("measured on 2026-11-28") and offences("at commit 5a3fc71")


def test_readme_keeps_the_two_commands_in_their_section():
    text = README.read_text()
    section = re.search(r"^## The two commands\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README.md needs its '## The two commands' section (CI runs its test command)"
    block = re.search(r"```sh\n(.*?)```", section.group(1), re.S)
    assert block, "the two commands in a sh code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make quickstart", "make test"]


def anchors(page) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {slugify(h, "-") for h in re.findall(r"^#{1,6} +(.+?) *$", text, re.M)}


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_relative_links_and_their_anchors_resolve(name):
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / name).read_text())
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(relative) >= 5  # both point into docs/
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"{name} links to {link}: no such file"
        if anchor:
            assert anchor in anchors(target), f"{name} links to {link}: no such heading"
