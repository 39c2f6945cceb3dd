"""A node restarted in transport mode is told the degradations that outlive its old process (its own
and its peers', as the shaper applied them), while the fault timeline goes on: a degrade or restore
that lands while it is being told neither breaks the restart (it once raised "dictionary changed size
during iteration") nor leaves the node with a stale degradation."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace

from orchestrator.model.link_shape import LinkShape
from orchestrator.shaping.mechanisms import TransportShaper

RESTORED = {"delay_ms": 0.0, "jitter_ms": 0.0, "loss": 0.0}


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


def shaper(node: Node, degraded: dict[str, dict], neighbours=("n1", "n2")) -> TransportShaper:
    """Transport mode's shaper with n0..n9's links applied, those in `degraded` degraded so."""
    plan = SimpleNamespace(node=lambda node_id: SimpleNamespace(contacts=None, neighbours=list(neighbours)))
    s = TransportShaper(plan, backend=None, blocking=asyncio.to_thread,
                        tell=lambda _node_id, body: node.post("/links", body), warn=print)
    s.applied = {f"n{i}": LinkShape(f"n{i}", 1000, 1000) for i in range(10)}
    for other, d in degraded.items():
        degrade(s, other, d)
    return s


def degrade(s: TransportShaper, node: str, d: dict) -> None:
    """What the timeline's degrade or restore leaves applied, as `apply_all` records it."""
    s.applied[node] = replace(s.applied[node], added_delay_ms=d["delay_ms"],
                                added_jitter_ms=d["jitter_ms"], added_loss=d["loss"])


def last_told(node: Node) -> dict[str, dict]:
    state = {}
    for body in node.told:
        state[body["node"]] = {k: v for k, v in body.items() if k != "node"}
    return state


def test_the_restarted_node_hears_its_own_and_its_peers_degradations_only():
    slow = {"delay_ms": 30.0, "jitter_ms": 0.0, "loss": 0.0}
    node = Node()
    asyncio.run(shaper(node, {"n0": slow, "n1": slow, "n9": slow}).restarted("n0"))
    assert last_told(node) == {"n0": slow, "n1": slow}  # n9 is no peer of n0; n2 is not degraded


def test_a_restore_and_a_degrade_during_the_telling_leave_the_current_state():
    slow, slower = {"delay_ms": 30.0, "jitter_ms": 0.0, "loss": 0.0}, {"delay_ms": 80.0, "jitter_ms": 5.0, "loss": 0.1}
    holder: list[TransportShaper] = []

    def timeline(body):  # while n1's degradation is in flight: n1 is restored, n2 degraded again
        if body["node"] == "n1" and body["delay_ms"] == 30.0:
            degrade(holder[0], "n1", RESTORED)
            degrade(holder[0], "n2", slower)
    node = Node(timeline)
    holder.append(shaper(node, {"n1": slow, "n2": slow}))
    asyncio.run(holder[0].restarted("n0"))
    assert last_told(node) == {"n1": RESTORED, "n2": slower}


def test_a_degradation_added_while_telling_is_left_to_the_degrade_itself():
    slow = {"delay_ms": 30.0, "jitter_ms": 0.0, "loss": 0.0}
    holder: list[TransportShaper] = []
    node = Node(lambda body: degrade(holder[0], "n2", slow))  # the degrade fault tells every live peer
    holder.append(shaper(node, {"n1": slow}))
    asyncio.run(holder[0].restarted("n0"))
    assert last_told(node) == {"n1": slow}
