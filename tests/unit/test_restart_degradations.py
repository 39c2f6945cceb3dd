"""A node restarted in transport mode is told the degradations that outlive its old process (its own
and its peers'), while the fault timeline goes on: a degrade or restore that lands while it is being
told neither breaks the restart (it once raised "dictionary changed size during iteration") nor
leaves the node with a stale degradation."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from orchestrator.shaping.mechanisms import RESTORED, TransportShaper


class Node:
    """The restarted node's control API: records every /links body, and lets a test act while a
    post is in flight (as the timeline's other faults do)."""

    def __init__(self, during_post=lambda body: None):
        self.told: list[dict] = []
        self.during_post = during_post

    async def post(self, path: str, body: dict) -> dict:
        assert path == "/links"
        self.during_post(body)
        await asyncio.sleep(0)  # the timeline runs here
        self.told.append(body)
        return {}


class Restart:
    """What the fault timeline's `start` does in transport mode: the node is told the live degradations."""

    def __init__(self, degraded: dict, node: Node, neighbours=("n1", "n2")):
        plan = SimpleNamespace(node=lambda node_id: SimpleNamespace(contacts=None, neighbours=list(neighbours)))
        self.degraded = degraded
        self.shaper = TransportShaper(plan, backend=None, blocking=asyncio.to_thread,
                                      tell=lambda _node_id, body: node.post("/links", body), warn=print)

    async def start(self, node_id: str) -> None:
        await self.shaper.restarted(node_id, self.degraded)


def live(degraded: dict, node: Node, neighbours=("n1", "n2")) -> Restart:
    return Restart(degraded, node, neighbours)


def last_told(node: Node) -> dict[str, dict]:
    state = {}
    for body in node.told:
        state[body["node"]] = {k: v for k, v in body.items() if k != "node"}
    return state


def test_the_restarted_node_hears_its_own_and_its_peers_degradations_only():
    slow = {"delay_ms": 30.0, "loss": 0.0}
    node = Node()
    asyncio.run(live({"n0": slow, "n1": slow, "n9": slow}, node).start("n0"))
    assert last_told(node) == {"n0": slow, "n1": slow}  # n9 is no peer of n0


def test_a_restore_and_a_degrade_during_the_telling_leave_the_current_state():
    slow, slower = {"delay_ms": 30.0, "loss": 0.0}, {"delay_ms": 80.0, "loss": 0.1}
    degraded = {"n1": slow, "n2": slow}

    def timeline(body):  # while n1's degradation is in flight: n1 is restored, n2 degraded again
        if body["node"] == "n1" and body["delay_ms"] == 30.0:
            degraded.pop("n1")
            degraded["n2"] = slower
    node = Node(timeline)
    asyncio.run(live(degraded, node).start("n0"))
    assert last_told(node) == {"n1": RESTORED, "n2": slower}


def test_a_degradation_added_while_telling_is_left_to_the_degrade_itself():
    slow = {"delay_ms": 30.0, "loss": 0.0}
    degraded = {"n1": slow}
    node = Node(lambda body: degraded.setdefault("n2", slow))  # the degrade fault tells every live peer
    asyncio.run(live(degraded, node).start("n0"))
    assert last_told(node) == {"n1": slow}
