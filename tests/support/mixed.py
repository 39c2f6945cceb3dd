"""The check a mixed network of libp2p implementations must pass on any backend
(scenarios/gossipsub-mixed.yaml): every node never killed received every message published after
its publisher's first second up, and not in the second before its publisher was killed (a publish
its implementation refused is not a message: it never left its node)."""
from __future__ import annotations

from typing import Any


def expected_messages(manifest: dict[str, Any], events: dict[str, list[dict[str, Any]]]) -> tuple[set[str], int]:
    """The msg_ids every node never killed must hold, and how many were published in all."""
    executed = manifest["faults_executed"]
    refused = {e["msg_id"] for evs in events.values() for e in evs if e["type"] == "publish_refused"}
    published = [e for evs in events.values() for e in evs if e["type"] == "publish_message" and e["msg_id"] not in refused]
    readies = {n: [e["ts"] for e in evs if e["type"] == "ready"] for n, evs in events.items()}
    kills = {f["node"]: f["t_ns"] for f in executed if f["action"] == "kill"}

    def expected_of(e: dict[str, Any]) -> bool:
        """Published after its publisher's first second up (since its last start), and not in the
        second before its publisher was killed (a message still in its queues dies with it)."""
        up = max(t for t in readies[e["node"]] if t < e["ts"])
        return e["ts"] > up + 1e9 and not 0 <= kills.get(e["node"], 0) - e["ts"] < 1e9

    return {e["msg_id"] for e in published if expected_of(e)}, len(published)


def missed_by_nodes_never_killed(manifest: dict[str, Any], events: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """node -> the expected msg_ids it lacks, for each node never killed that lacks any."""
    expected, _ = expected_messages(manifest, events)
    killed = {f["node"] for f in manifest["faults_executed"] if f["action"] == "kill"}
    out = {}
    for node, evs in events.items():
        if node in killed:  # what fell in its downtime is not expected of it
            continue
        got = {e["msg_id"] for e in evs if e["type"] in ("deliver_message", "publish_message")}
        if expected - got:
            out[node] = sorted(expected - got)
    return out
