"""`make test` runs pytest with --no-skips (tests/conftest.py): a test that skips there fails, with its
reason, so a machine without a Docker engine or a data set cannot pass for one that ran everything;
without the option a skip stays a skip, and an expected failure stays expected."""
import subprocess
import sys

from tests.support.cli import ROOT, patient

TESTS = '''
import pytest

def test_skips():
    pytest.skip("no engine here")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False
'''


def run(tmp_path, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_some.py").write_text(TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", *options, "-q", "-rfs",
                           "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path / "test_some.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=patient(120))


def test_with_no_skips_a_skip_fails_and_says_why(tmp_path):
    done = run(tmp_path, "--no-skips")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 xfailed" in done.stdout and "no engine here" in done.stdout


def test_without_it_a_skip_is_a_skip(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "1 skipped, 1 xfailed" in done.stdout
