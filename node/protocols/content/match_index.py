"""Which members' filters does an event match? FastDelivery's per-group subscription index (seed:
SmartPubSub paper, section II-C: "a list ... or range trees ... the same number of range
trees [as range attributes] and go through their query results").

Every filter is an entry (member, filter). Each range attribute gets one interval tree of the
entries that constrain it. A query asks each tree for the entries whose range holds the event's
value. For that attribute, the entries that constrain it but are not in the answer are out. What
survives is checked with `Predicate.matches`, which covers the topic attributes too.
"""
from __future__ import annotations

from intervaltree import Interval, IntervalTree

from node.protocols.content.predicates import Predicate

Entry = tuple[str, int]  # (member, index of its filter)


class MatchIndex:
    def __init__(self) -> None:
        self.filters: dict[str, list[Predicate]] = {}
        self.trees: dict[str, IntervalTree] = {}
        self.constrained: dict[str, set[Entry]] = {}

    def __len__(self) -> int:
        return len(self.filters)

    def __contains__(self, member: str) -> bool:
        return member in self.filters

    def members(self) -> list[str]:
        return sorted(self.filters)

    def add(self, member: str, filters: list[Predicate]) -> None:
        """Set `member`'s filters (replacing any it had)."""
        self.remove(member)
        self.filters[member] = list(filters)
        for i, f in enumerate(filters):
            for a in f:
                if a.kind == "R":
                    # intervaltree's intervals are half-open; predicate ranges are inclusive integers
                    self.trees.setdefault(a.name, IntervalTree()).add(Interval(a.lo, a.hi + 1, (member, i)))
                    self.constrained.setdefault(a.name, set()).add((member, i))

    def remove(self, member: str) -> None:
        for i, f in enumerate(self.filters.pop(member, [])):
            for a in f:
                if a.kind == "R":
                    self.trees[a.name].discard(Interval(a.lo, a.hi + 1, (member, i)))
                    self.constrained[a.name].discard((member, i))

    def query(self, event: Predicate) -> set[str]:
        """The members one of whose filters matches `event`."""
        entries = {(m, i) for m, fs in self.filters.items() for i in range(len(fs))}
        for a in event:
            if a.kind != "R" or a.name not in self.trees:
                continue
            hits = {iv.data for iv in self.trees[a.name].at(a.lo) if iv.end - 1 >= a.hi}
            entries -= self.constrained[a.name] - hits
        return {m for m, i in entries if self.filters[m][i].matches(event)}
