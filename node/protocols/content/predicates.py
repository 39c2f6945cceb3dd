"""SmartPubSub's content predicates (SmartPubSub paper, section II-B): parse, match,
cover and safe merge.

A predicate is up to 5 attributes joined by '/': a topic attribute `name T`, or an integer range
attribute `name R lo hi`. Subscriptions use ranges; events use point ranges (`price R 1200 1200`).
- match: a filter matches an event when every attribute of the filter appears in the event with the
  same kind, and each of the event's ranges lies inside the filter's;
- cover: the same test between two filters (a covers b: whatever b matches, a matches);
- safe merge: two filters with the same attributes that differ in exactly one range, where those
  ranges overlap or touch, merge into their hull - which matches exactly what either part matches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

MAX_ATTRIBUTES = 5


@dataclass(frozen=True, order=True)
class Attribute:
    name: str
    kind: str           # "T" topic, "R" range
    lo: int = 0
    hi: int = 0

    def __str__(self) -> str:
        return f"{self.name} T" if self.kind == "T" else f"{self.name} R {self.lo} {self.hi}"


class PredicateError(ValueError):
    pass


@dataclass(frozen=True)
class Predicate:
    attrs: tuple[Attribute, ...]   # sorted by name, names unique

    @classmethod
    def parse(cls, text: str) -> "Predicate":
        parts = [p.strip() for p in text.split("/") if p.strip()]
        if not parts:
            raise PredicateError(f"predicate {text!r} is empty; write e.g. 'surf T/price R 1000 1500'")
        if len(parts) > MAX_ATTRIBUTES:
            raise PredicateError(f"predicate {text!r} has {len(parts)} attributes; at most {MAX_ATTRIBUTES}")
        attrs = []
        for part in parts:
            words = part.split()
            if len(words) == 2 and words[1] == "T":
                attrs.append(Attribute(words[0], "T"))
            elif len(words) == 4 and words[1] == "R":
                try:
                    lo, hi = int(words[2]), int(words[3])
                except ValueError:
                    raise PredicateError(f"predicate {text!r}: range {part!r} needs integer bounds") from None
                if lo > hi:
                    raise PredicateError(f"predicate {text!r}: range {part!r} has lo > hi")
                attrs.append(Attribute(words[0], "R", lo, hi))
            else:
                raise PredicateError(f"predicate {text!r}: attribute {part!r} is neither 'name T' nor "
                                     "'name R lo hi'")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise PredicateError(f"predicate {text!r} names an attribute twice")
        return cls(tuple(sorted(attrs)))

    def __str__(self) -> str:
        return "/".join(str(a) for a in self.attrs)

    def __iter__(self) -> Iterator[Attribute]:
        return iter(self.attrs)

    def names(self) -> list[str]:
        return [a.name for a in self.attrs]

    def matches(self, event: "Predicate") -> bool:
        """Every attribute here is in `event`, of the same kind, its range inside ours."""
        theirs = {a.name: a for a in event.attrs}
        for a in self.attrs:
            b = theirs.get(a.name)
            if b is None or b.kind != a.kind or (a.kind == "R" and not (a.lo <= b.lo and b.hi <= a.hi)):
                return False
        return True

    covers = matches  # a filter covers another when it matches everything that one matches

    def overlaps(self, other: "Predicate") -> bool:
        """Could one event match both? Every attribute the two share has the same kind, and shared
        ranges intersect (FastDelivery: is a multicast group of interest to a filter)."""
        theirs = {a.name: a for a in other.attrs}
        for a in self.attrs:
            b = theirs.get(a.name)
            if b is not None and (b.kind != a.kind or (a.kind == "R" and (a.hi < b.lo or b.hi < a.lo))):
                return False
        return True

    def merge(self, other: "Predicate") -> "Predicate | None":
        """The safe merge (see the module docstring), or None when the two may not merge."""
        if self == other:
            return self
        if self.names() != other.names():
            return None
        differ = [(a, b) for a, b in zip(self.attrs, other.attrs) if a != b]
        if len(differ) != 1:
            return None
        a, b = differ[0]
        if a.kind != "R" or b.kind != "R" or a.hi + 1 < b.lo or b.hi + 1 < a.lo:
            return None
        hull = Attribute(a.name, "R", min(a.lo, b.lo), max(a.hi, b.hi))
        return Predicate(tuple(hull if x == a else x for x in self.attrs))


def group_predicates(events: list[str]) -> list[str]:
    """FastDelivery: the multicast groups a publisher of these events advertises - one per set of
    attributes, each range the hull of the events' values (so the group covers every one of them)."""
    hulls: dict[tuple[tuple[str, str], ...], list[Attribute]] = {}
    for text in events:
        pred = Predicate.parse(text)
        shape = tuple((a.name, a.kind) for a in pred)
        if shape not in hulls:
            hulls[shape] = list(pred)
        else:
            hulls[shape] = [Attribute(a.name, a.kind, min(a.lo, b.lo), max(a.hi, b.hi))
                            for a, b in zip(hulls[shape], pred)]
    return [str(Predicate(tuple(attrs))) for attrs in hulls.values()]


def expected_topics(matching: str, topics: list[str], subscriptions: list[str]) -> list[str]:
    """The topics whose messages a node expects: its subscriptions (matching "topic"), or the event
    predicates among `topics` that one of its filters matches (matching "predicate")."""
    if matching != "predicate":
        return subscriptions
    filters = [Predicate.parse(f) for f in subscriptions]
    return [t for t in topics if any(f.matches(Predicate.parse(t)) for f in filters)]


def subscription_times(matching: str, topics: list[str], subscriptions: list[str],
                       late: list[tuple[float, str]]) -> dict[str, float]:
    """Topic -> seconds after T0 from which a node expects its messages: 0 for what its start-up
    subscriptions give it, else the earliest of its timed subscriptions (`late`) that gives it."""
    since: dict[str, float] = {}
    for at, filters in [(0.0, subscriptions)] + [(at, [f]) for at, f in late]:
        for t in expected_topics(matching, topics, filters):
            since[t] = min(since.get(t, at), at)
    return since
