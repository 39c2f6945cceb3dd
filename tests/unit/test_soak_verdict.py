"""`peerlab bench soak` fails on what a soak is for (orchestrator/tools/bench_soak.problems): a publish
unaccounted for, namespaces or processes left, the orchestrator's RSS or descriptors grown past their
limits; a clean soak passes."""
import pytest

from orchestrator.tools.bench_soak import FDS_GROWTH, RSS_GROWTH_MIB, problems

CLEAN = {"unaccounted": 0, "namespaces_after": 0, "processes_after": 0, "rss_first_mib": 90.0,
         "rss_growth_mib": 3.5, "fds_growth": 2}


def test_a_clean_soak_passes():
    assert problems(CLEAN) == []


@pytest.mark.parametrize("field, value, says", [
    ("unaccounted", 3, "3 planned publishes"),
    ("namespaces_after", 2, "2 of the run's network namespaces"),
    ("processes_after", 1, "1 processes left"),
    ("rss_growth_mib", RSS_GROWTH_MIB + 1, "RSS grew"),
    ("fds_growth", FDS_GROWTH + 1, "descriptors grew"),
])
def test_each_leak_fails_it(field, value, says):
    found = problems({**CLEAN, field: value})
    assert len(found) == 1 and says in found[0], found


def test_rss_growth_is_judged_against_a_share_of_a_large_orchestrator():
    assert problems({**CLEAN, "rss_first_mib": 400.0, "rss_growth_mib": 90.0}) == []   # under 25% of 400
    assert problems({**CLEAN, "rss_first_mib": 400.0, "rss_growth_mib": 110.0})
