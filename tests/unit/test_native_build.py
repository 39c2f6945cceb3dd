"""The native delay line's build helper: one build per version of the sources, in the cache outside
the checkout; a failed build names the package to install."""
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator.shaping import native_build
from tests.support.cli import patient

FAKE_CC = """#!/bin/sh
echo "$@" >> "{log}"
{body}
"""
WRITES_OUTPUT = 'while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done; printf "#!/bin/sh\\n" > "$out"; ' \
                'chmod +x "$out"'


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PEERLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "bin"


def _fake_cc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    log, cc = tmp_path / "cc.log", tmp_path / "cc"
    cc.write_text(FAKE_CC.format(log=log, body=body))
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(native_build, "CC", str(cc))
    return log


def test_the_binary_is_built_once_then_found_in_the_cache(cache, tmp_path, monkeypatch):
    log = _fake_cc(tmp_path, monkeypatch, WRITES_OUTPUT)
    first = native_build.path()
    assert first.parent == cache and first.name == f"peerlab-delayline-{native_build.digest()}"
    assert len(log.read_text().splitlines()) == 1
    assert native_build.path() == first
    assert len(log.read_text().splitlines()) == 1  # the cache hit built nothing
    assert [p.name for p in cache.iterdir()] == [first.name]  # no partial file left beside it


def test_changed_sources_get_a_binary_of_their_own(tmp_path, monkeypatch):
    sources = tmp_path / "native"
    shutil.copytree(native_build.SOURCES, sources)
    monkeypatch.setattr(native_build, "SOURCES", sources)
    before = native_build.digest()
    with open(sources / "model.c", "a") as f:
        f.write("/* changed */\n")
    assert native_build.digest() != before


def test_a_missing_header_names_the_package_to_install(cache, tmp_path, monkeypatch):
    _fake_cc(tmp_path, monkeypatch, 'echo "nfq.c:16:10: fatal error: libnetfilter_queue/libnetfilter_queue.h: '
                                    'No such file or directory" >&2; exit 1')
    with pytest.raises(native_build.BuildError, match="install libnetfilter-queue-dev"):
        native_build.path()
    assert not cache.exists() or not list(cache.iterdir())


def test_path_without_build_only_names_the_binary(cache, tmp_path, monkeypatch):
    log = _fake_cc(tmp_path, monkeypatch, WRITES_OUTPUT)
    assert not native_build.path(build=False).exists() and not log.exists()


def test_the_sources_build_with_warnings_as_errors_and_the_binary_runs(cache):
    binary = native_build.path()  # the real compiler, -Wall -Wextra -Werror
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=patient(10))
    assert done.returncode == 0 and "--probe" in done.stdout
    assert subprocess.run([str(binary), "--no-such-flag"], capture_output=True, timeout=patient(10)).returncode == 2
