"""Predicate laws (property tests): match, cover and the safe merge of ScoutSubs' filters; overlap,
group hulls and the interval-tree match index of FastDelivery."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.protocols.content.match_index import MatchIndex
from node.protocols.content.predicates import Attribute, Predicate, PredicateError, group_predicates

NAMES = ["surf", "bali", "trip", "ipfs", "price", "year"]


@st.composite
def filters(draw, names=st.sampled_from(NAMES)):
    chosen = draw(st.lists(names, min_size=1, max_size=5, unique=True))
    attrs = []
    for name in chosen:
        if draw(st.booleans()):
            attrs.append(Attribute(name, "T"))
        else:
            lo = draw(st.integers(0, 60))
            attrs.append(Attribute(name, "R", lo, lo + draw(st.integers(0, 40))))
    return Predicate(tuple(sorted(attrs)))


@st.composite
def events_like(draw, base: Predicate):
    """An event (point ranges) with the attributes of `base`, values near its ranges, plus extras."""
    attrs = {}
    for a in base:
        kind = a.kind if draw(st.integers(0, 9)) else ("T" if a.kind == "R" else "R")
        v = draw(st.integers(-5, 110))
        attrs[a.name] = Attribute(a.name, kind, v, v) if kind == "R" else Attribute(a.name, "T")
    if draw(st.booleans()) and len(attrs) > 1:
        attrs.pop(draw(st.sampled_from(sorted(attrs))))
    return Predicate(tuple(sorted(attrs.values())))


@st.composite
def matching_event(draw, base: Predicate):
    """An event `base` matches: its attributes of the same kinds, each value inside base's range
    (its ends included), plus unrelated extras."""
    attrs = {}
    for a in base:
        if a.kind == "R":
            v = draw(st.one_of(st.sampled_from([a.lo, a.hi]), st.integers(a.lo, a.hi)))
            attrs[a.name] = Attribute(a.name, "R", v, v)
        else:
            attrs[a.name] = Attribute(a.name, "T")
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=2, unique=True)):
        attrs.setdefault(name, Attribute(name, "T"))
    return Predicate(tuple(sorted(attrs.values())))


@st.composite
def near_cover(draw, base: Predicate, pull: bool = True):
    """(a filter, whether it covers `base`): built to cover it (some of its attributes, each range
    widened by 0-10 at each end), then (`pull`), half the time, one range pulled in by 1-10 at one
    end, which uncovers `base` when the pull is more than that end's widening."""
    kept = draw(st.lists(st.sampled_from(list(base)), min_size=1, unique=True))
    attrs, covers = [], True
    pulled = draw(st.sampled_from([i for i, a in enumerate(kept) if a.kind == "R"] or [None])) if pull else None
    if pulled is not None and draw(st.booleans()):
        pulled = None
    for i, a in enumerate(kept):
        if a.kind != "R":
            attrs.append(a)
            continue
        lo, hi = a.lo - draw(st.integers(0, 10)), a.hi + draw(st.integers(0, 10))
        if i == pulled:
            cut = draw(st.integers(1, 10))
            if draw(st.booleans()):
                lo += cut
                hi = max(lo, hi)
                covers = lo <= a.lo
            else:
                hi -= cut
                lo = min(lo, hi)
                covers = hi >= a.hi
        attrs.append(Attribute(a.name, "R", lo, hi))
    return Predicate(tuple(sorted(attrs))), covers


@st.composite
def mergeable_pair(draw):
    """Two filters with the same attributes differing in one range (overlapping or not)."""
    a = draw(filters())
    ranges = [x for x in a if x.kind == "R"]
    if not ranges:
        return a, a
    r = draw(st.sampled_from(ranges))
    lo = draw(st.integers(0, 100))
    other = Attribute(r.name, "R", lo, lo + draw(st.integers(0, 40)))
    return a, Predicate(tuple(sorted(other if x == r else x for x in a)))


def test_parse_and_print_round_trip():
    p = Predicate.parse("surf T/price R 1000 1500/bali T")
    assert str(p) == "bali T/price R 1000 1500/surf T"
    assert Predicate.parse(str(p)) == p


@pytest.mark.parametrize("text, why", [
    ("", "empty"), ("a T/b T/c T/d T/e T/f T", "at most 5"), ("price R 5 1", "lo > hi"),
    ("price R x 1", "integer"), ("surf", "neither"), ("a T/a T", "twice")])
def test_bad_predicates_say_why(text, why):
    with pytest.raises(PredicateError, match=why):
        Predicate.parse(text)


def test_match_examples():
    f = Predicate.parse("surf T/bali T/price R 1000 1500")
    assert f.matches(Predicate.parse("surf T/bali T/trip T/price R 1200 1200"))
    assert not f.matches(Predicate.parse("surf T/bali T/price R 1600 1600"))
    assert not f.matches(Predicate.parse("surf T/price R 1200 1200"))   # bali missing
    assert Predicate.parse("ipfs T").matches(Predicate.parse("ipfs T/year R 3 3"))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_merged_filter_never_matches_less_than_its_parts_and_no_more(data):
    a, b = data.draw(mergeable_pair())
    merged = a.merge(b)
    for base in (a, b):
        event = data.draw(events_like(base))
        either = a.matches(event) or b.matches(event)
        if merged is not None:
            assert merged.matches(event) >= either          # never less than its parts
            assert merged.matches(event) == either          # and, being safe, no more
            assert merged.covers(a) and merged.covers(b)


def extremes(base: Predicate) -> tuple[Predicate, Predicate]:
    """The two events base matches at the ends of all its ranges: every value at lo, every one at hi."""
    return tuple(Predicate(tuple(sorted(Attribute(x.name, "R", getattr(x, end), getattr(x, end))
                                        if x.kind == "R" else x for x in base))) for end in ("lo", "hi"))


@settings(max_examples=300, deadline=None)
@given(filters(), st.data())
def test_cover_is_sound_for_matching(b, data):
    """A filter that covers b matches every event b matches; one that does not cover b misses one of
    them. The pairs are built so that about half cover b and half just fail to (a range end pulled
    in), the events so that b matches them, the ends of its ranges included."""
    a, covers = data.draw(near_cover(b))
    event = data.draw(matching_event(b))
    low, high = extremes(b)
    assert b.matches(event) and b.matches(low) and b.matches(high)
    assert a.covers(b) == covers
    if covers:
        assert a.matches(event) and a.matches(low) and a.matches(high)
    else:
        assert not (a.matches(low) and a.matches(high))


@settings(max_examples=200, deadline=None)
@given(filters(), st.data())
def test_cover_is_reflexive_and_transitive(c, data):
    assert c.covers(c)
    b, _ = data.draw(near_cover(c, pull=False))
    a, _ = data.draw(near_cover(b, pull=False))
    assert b.covers(c) and a.covers(b)  # built to
    assert a.covers(c)


@settings(max_examples=200, deadline=None)
@given(filters(), filters())
def test_merge_is_symmetric(a, b):
    assert a.merge(b) == b.merge(a)


def test_merge_refuses_unsafe_pairs():
    p = Predicate.parse
    assert p("x T/price R 0 10").merge(p("x T/price R 5 20")) == p("x T/price R 0 20")
    assert p("x T/price R 0 10").merge(p("x T/price R 11 20")) == p("x T/price R 0 20")  # touching
    assert p("x T/price R 0 10").merge(p("x T/price R 12 20")) is None                   # a gap
    assert p("x T/price R 0 10/y R 0 5").merge(p("x T/price R 5 20/y R 1 9")) is None    # two differ
    assert p("x T/price R 0 10").merge(p("z T/price R 0 10")) is None                    # other topic


@st.composite
def matching_filter(draw, event: Predicate):
    """A filter that matches `event`: some of its attributes, each range widened around the event's
    value by 0-20 at each end."""
    chosen = draw(st.lists(st.sampled_from(list(event)), min_size=1, unique=True))
    attrs = [a if a.kind == "T" else Attribute(a.name, "R", a.lo - draw(st.integers(0, 20)), a.hi + draw(st.integers(0, 20)))
             for a in chosen]
    return Predicate(tuple(sorted(attrs)))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(filters(), st.data())
def test_overlap_is_sound_an_event_matching_both_means_they_overlap(a, data):
    event = data.draw(matching_event(a))
    b = data.draw(matching_filter(event))
    assert a.matches(event) and b.matches(event)  # (the strategies' promise: every example tests the law)
    assert a.overlaps(b) and b.overlaps(a)


def test_overlap_examples():
    p = Predicate.parse
    group = p("surf T/bali T/trip T/price R 1200 1600")
    assert group.overlaps(p("surf T/bali T/trip T/price R 1000 1500"))
    assert group.overlaps(p("bali T/trip T"))
    assert not group.overlaps(p("surf T/price R 0 800"))
    assert not p("x T").overlaps(p("x R 1 1"))


def test_group_predicates_cover_every_event_with_one_group_per_attribute_set():
    events = ["surf T/price R 1200 1200", "surf T/price R 1600 1600", "ipfs T/year R 2021 2021",
              "surf T/price R 500 500"]
    groups = [Predicate.parse(g) for g in group_predicates(events)]
    assert [str(g) for g in groups] == ["price R 500 1600/surf T", "ipfs T/year R 2021 2021"]
    for e in events:
        assert sum(g.covers(Predicate.parse(e)) for g in groups) == 1


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(filters(), min_size=1, max_size=3), min_size=1, max_size=12), st.data())
def test_match_index_answers_exactly_what_matching_every_filter_answers(members, data):
    index = MatchIndex()
    for i, fs in enumerate(members):
        index.add(f"m{i}", fs)
    gone = data.draw(st.sets(st.integers(0, len(members) - 1)))
    for i in gone:
        index.remove(f"m{i}")
    if 0 in gone and data.draw(st.booleans()):  # removed, then back
        index.add("m0", members[0])
        gone.discard(0)
    present = {f"m{i}": fs for i, fs in enumerate(members) if i not in gone}
    for _ in range(5):
        event = data.draw(events_like(data.draw(st.sampled_from([f for fs in members for f in fs]))))
        assert index.query(event) == {m for m, fs in present.items() if any(f.matches(event) for f in fs)}
    assert index.members() == sorted(present)
