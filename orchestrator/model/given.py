"""The parts of a scenario given as lists instead of drawn by the planner: who dials whom
(`topology.algorithm: given`, `topology.dial`), who subscribes to what (`topics.subscriptions.model: given`) and every
publish (`workload.schedule`). An imported experiment is written this way (`peerlab contract
interop-import`, docs/interop.md): its script names each edge, subscription and message."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from .strict import Strict
from .units import Duration, Size

GIVEN = "given"


class LateSubscription(Strict):
    at: Duration = Field(..., ge=0, description="seconds after T0")
    node: int = Field(..., ge=0, description="node index (n7 is 7)")
    topic: str


class GivenSubscriptions(Strict):
    """Each node's topics, as listed (an imported experiment)."""
    model: Literal["given"]
    nodes: dict[int, list[str]] = Field(default_factory=dict, description="node index -> the topics it subscribes "
                                                                          "to at start (a node not listed: none)")
    late: list[LateSubscription] = Field(default_factory=list, description="subscriptions made during the run; "
                                         "the node is expected to receive what is published from then on")

    def of(self, n: int) -> tuple[list[list[str]], list[list[tuple[float, str]]]]:
        """Per node index: its topics at start, and its late (seconds after T0, topic)."""
        at_start = [list(dict.fromkeys(self.nodes.get(i, []))) for i in range(n)]
        late: list[list[tuple[float, str]]] = [[] for _ in range(n)]
        for sub in self.late:
            late[sub.node].append((sub.at, sub.topic))
        return at_start, [sorted(x) for x in late]

    def indexes(self) -> list[tuple[str, int]]:  # (a negative one is refused by the scenario's range check)
        """(field path, node index) of every node named, for the scenario's range check."""
        return ([(f"topics.subscriptions.nodes.{i}", i) for i in self.nodes]
                + [(f"topics.subscriptions.late[{k}].node", s.node) for k, s in enumerate(self.late)])

    def topics(self) -> list[tuple[str, str]]:
        """(field path, topic) of every topic named."""
        return ([(f"topics.subscriptions.nodes.{i}", t) for i, ts in self.nodes.items() for t in ts]
                + [(f"topics.subscriptions.late[{k}].topic", s.topic) for k, s in enumerate(self.late)])


class Publish(Strict):
    at: Duration = Field(..., ge=0, description="seconds after T0")
    node: int = Field(..., ge=0, description="the publisher's node index (n7 is 7)")
    topic: str
    size: Size = Field(..., gt=0, description="message size")


def check_dial(dial: dict[int, list[int]]) -> dict[int, list[int]]:
    """Who dials whom, by node index: no self-loop, no pair linked twice (either way)."""
    seen: set[frozenset[int]] = set()
    for a, peers in dial.items():
        for b in peers:
            if a < 0 or b < 0:
                raise ValueError(f"dial.{a}: node indexes are 0 or more, not {b if a >= 0 else a}")
            if a == b:
                raise ValueError(f"dial.{a}: node {a} dials itself")
            pair = frozenset((a, b))
            if pair in seen:
                raise ValueError(f"dial.{a}: nodes {a} and {b} are linked twice")
            seen.add(pair)
    return dial

