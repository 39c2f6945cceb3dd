"""A gossipsub-interop params.json read back, node by node: what each node's binary would do and at
which whole second from its start (the inverse of script.py, for `peerlab contract interop-import`).

Every node runs the same script: an `ifNodeIDEquals` instruction acts on the node it names only, the
others on every node; `waitUntil` moves the node's clock forward (never back). Partial messages have
no peerlab counterpart and are refused, named by their place in the script.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .script import NS, PARAMS

FROM_FIELD = {go: (name, seconds) for name, (go, seconds) in PARAMS.items()}  # go field -> peerlab name


@dataclass
class NodeScript:
    """One node's instructions as it would carry them out (times: whole seconds from its start)."""
    index: int
    params: dict[str, Any] | None = None          # initGossipSub's, under peerlab's names
    validation_delays: dict[str, float] = field(default_factory=dict)  # topic -> seconds
    subscriptions: list[tuple[int, str]] = field(default_factory=list)
    connects: list[tuple[int, int]] = field(default_factory=list)    # (elapsed, peer index)
    publishes: list[tuple[int, str, int]] = field(default_factory=list)  # (elapsed, topic, size)


def peerlab_params(go_params: dict[str, Any], where: str) -> dict[str, Any]:
    """initGossipSub's `gossipSubParams` (go-libp2p-pubsub's names, times in ns) under peerlab's names."""
    out: dict[str, Any] = {}
    for go, value in go_params.items():
        if value is None:  # (their schema: null is the implementation's default)
            continue
        if go not in FROM_FIELD:
            raise ValueError(f"{where}.gossipSubParams.{go}: peerlab has no counterpart (it reads "
                             f"{', '.join(FROM_FIELD)})")
        name, seconds = FROM_FIELD[go]
        out[name] = value / NS if seconds else value
    return out


def node_count(params: dict[str, Any]) -> int:
    """How many nodes the script names: one more than the highest `nodeID` or `connectTo` index."""
    highest = -1

    def visit(instruction: dict[str, Any]) -> None:
        nonlocal highest
        if instruction.get("type") == "ifNodeIDEquals":
            highest = max(highest, int(instruction["nodeID"]))
            visit(instruction["instruction"])
        elif instruction.get("type") == "connect":
            highest = max([highest, *map(int, instruction["connectTo"])])
    for instruction in params["script"]:
        visit(instruction)
    return highest + 1


def read(params: dict[str, Any], nodes: int) -> list[NodeScript]:
    """Each of `nodes` nodes' part of the script (run `script.problems` on it first: this assumes its
    shape)."""
    out = []
    for i in range(nodes):
        node = NodeScript(i)
        elapsed = 0
        for k, instruction in enumerate(params["script"]):
            elapsed = _carry_out(node, instruction, elapsed, f"script[{k}]")
        out.append(node)
    return out


def _carry_out(node: NodeScript, instruction: dict[str, Any], elapsed: int, where: str) -> int:
    kind = instruction["type"]
    if kind == "ifNodeIDEquals":
        if int(instruction["nodeID"]) == node.index:
            return _carry_out(node, instruction["instruction"], elapsed, f"{where}.instruction")
    elif kind == "waitUntil":
        return max(elapsed, int(instruction["elapsedSeconds"]))
    elif kind == "initGossipSub":
        node.params = peerlab_params(instruction.get("gossipSubParams") or {}, where)
    elif kind == "setTopicValidationDelay":
        node.validation_delays[instruction["topicID"]] = float(instruction["delaySeconds"])
    elif kind == "subscribeToTopic":
        if instruction.get("partial"):
            raise ValueError(f"{where}: a partial subscription has no peerlab counterpart (partial messages are "
                             "not imported)")
        node.subscriptions.append((elapsed, instruction["topicID"]))
    elif kind == "connect":
        node.connects += [(elapsed, int(peer)) for peer in instruction["connectTo"]]
    elif kind == "publish":
        node.publishes.append((elapsed, instruction["topicID"], int(instruction["messageSizeBytes"])))
    else:
        raise ValueError(f"{where}: {kind} has no peerlab counterpart (partial messages are not imported)")
    return elapsed
