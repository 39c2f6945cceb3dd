"""`peerlab bench delayline`: the delay line alone between real namespaces, as a user runs it: it
completes, prints its figures, and leaves no namespace behind (it was broken by a move in the shaping
package without any test noticing)."""
import pytest

from tests.support.cli import peerlab, run_netns

pytestmark = [pytest.mark.emulation, pytest.mark.exclusive]  # its namespaces are named like a run's


def test_bench_delayline_runs_and_cleans_up():
    before = run_netns()
    result = peerlab("bench", "delayline", "--duration", "2s", timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    for figure in ("released 10 ms or more late", "RTT under load", "goodput per sender", "CPU: the delay line"):
        assert figure in out, out[-2000:]
    assert "machine was" in out and "% busy" in out
    assert run_netns() == before
