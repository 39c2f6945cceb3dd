"""A scenario from a gossipsub-interop experiment (`peerlab contract interop-import`): what its
params.json says (GossipSub parameters, validation delay, who dials whom, subscriptions, publishes) written as a
scenario's given parts (orchestrator/model/given.py), over a base scenario that brings what a
params.json does not hold: the network, node groups and implementations, seed, warm-up and drain.

Times: the script counts whole seconds from each binary's start; T0 is `lead` seconds after it (the
export's `--lead`). A subscription made before T0 is one at start, one after it a late subscription.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from node.interop.reading import NodeScript

DRAWN = ("publishers", "rate", "interval", "arrival", "publish_topics", "publisher_skew",
         "messages_per_publisher", "message_size", "events")
THEIR_NETWORK = {"latency": {"model": "weighted-regions"}}  # their eight regions, weights and latencies
DEFAULT_DRAIN = 10.0
# their experiments give each node its own initial heartbeat delay (100.1 ms, 100.2 ms, ...) to spread
# the heartbeats; a scenario gives one value to all, so differing ones are left to the implementation
PER_NODE_SPREAD = ("heartbeat_initial_delay",)


def _same_everywhere(scripts: list[NodeScript], what: str, value_of: Any) -> Any:
    """The one value every node has for `what`, or a ValueError naming two nodes that differ."""
    first = value_of(scripts[0])
    for s in scripts[1:]:
        if value_of(s) != first:
            raise ValueError(f"nodes 0 and {s.index} differ in {what} ({first} and {value_of(s)}): a scenario gives "
                             "every node the same; import one group's script at a time")
    return first


def _params(scripts: list[NodeScript], notes: list[str]) -> dict[str, Any]:
    for name in PER_NODE_SPREAD:
        values = {(s.params or {}).get(name) for s in scripts}
        if len(values) > 1:
            shown = sorted(v for v in values if v is not None)
            notes.append(f"{name} differs per node ({shown[0]:g} to {shown[-1]:g} s: their spread of heartbeats); "
                         "left to each implementation's default")
            for s in scripts:
                (s.params or {}).pop(name, None)
    params = dict(_same_everywhere(scripts, "initGossipSub", lambda s: s.params) or {})
    delays = {d for s in scripts for d in s.validation_delays.values()}
    if len(delays) > 1:
        raise ValueError(f"validation delays differ ({', '.join(map(str, sorted(delays)))} s): peerlab's "
                         "validation.delay is one for every topic and node")
    if delays and (delay := delays.pop()):
        params["validation"] = {"delay": delay}
    return params


def _topics(scripts: list[NodeScript]) -> dict[str, Any]:
    """topics.count when the names are peerlab's own (t0, t1, ... all there), else topics.names."""
    named = [t for s in scripts for t in [*(t for _, t in s.subscriptions), *s.validation_delays,
                                          *(t for _, t, _ in s.publishes)]]
    names = list(dict.fromkeys(named))
    if all(re.fullmatch(r"t(0|[1-9]\d*)", t) for t in names) and \
            sorted(int(t[1:]) for t in names) == list(range(len(names))):
        return {"count": max(1, len(names))}
    return {"names": names}


def _seconds_after_t0(elapsed: int, lead: int, what: str) -> float:
    if elapsed < lead:
        raise ValueError(f"{what} at {elapsed} s from the binaries' start, before T0 (--lead {lead}); give a "
                         f"--lead of {elapsed} or less")
    return float(elapsed - lead)


def scenario(scripts: list[NodeScript], *, name: str, lead: int, base: dict[str, Any] | None = None,
             window: tuple[float, float, float] | None = None, implementation: str | None = None,
             notes: list[str] | None = None) -> dict[str, Any]:
    """The scenario (as YAML would hold it) of these nodes' scripts, over `base` (or their network).
    `window`: the base's (warmup, duration, drain) in seconds, kept if it holds every publish (the drain
    is kept in any case). `notes` gets what was left out, for the user."""
    notes = [] if notes is None else notes
    if not scripts:
        raise ValueError("the script names no node")
    sc = copy.deepcopy(base) if base else {"network": THEIR_NETWORK}
    for k, group in enumerate(sc.get("nodes", {}).get("groups", [])):
        if group.get("params"):
            raise ValueError(f"--base: nodes.groups[{k}].params: an imported experiment gives every node the "
                             "script's parameters; leave the group's out")
    sc["name"] = name
    sc["nodes"] = {**sc.get("nodes", {}), "count": len(scripts)}
    protocol = sc.get("protocol", "gossipsub")
    protocol = {"name": protocol} if isinstance(protocol, str) else dict(protocol)
    if protocol["name"] != "gossipsub":
        raise ValueError(f"--base runs {protocol['name']}; a gossipsub-interop experiment is gossipsub")
    protocol["params"] = _params(scripts, notes)
    if implementation:
        protocol["implementation"] = implementation
        for group in sc["nodes"].get("groups", []):
            group.pop("implementation", None)  # every node runs the one named
    sc["protocol"] = protocol
    late_links = [(s.index, peer, elapsed) for s in scripts for elapsed, peer in s.connects if elapsed >= lead]
    if late_links:
        a, b, elapsed = late_links[0]
        raise ValueError(f"node {a} connects to {b} at {elapsed} s from the binaries' start, after T0 (--lead {lead}): "
                         "a scenario's links are made before T0 (a link made later is a fault peerlab has no "
                         "instruction for); give a larger --lead")
    sc["topology"] = {"algorithm": "given",
                      "dial": {s.index: sorted({peer for _, peer in s.connects}) for s in scripts if s.connects}}

    at_start: dict[int, list[str]] = {}
    late = []
    for s in scripts:
        for elapsed, topic in s.subscriptions:
            if elapsed < lead:
                at_start.setdefault(s.index, []).append(topic)
            else:
                late.append({"at": float(elapsed - lead), "node": s.index, "topic": topic})
    subscriptions: dict[str, Any] = {"model": "given", "nodes": at_start}
    if late:
        subscriptions["late"] = late
    sc["topics"] = {**_topics(scripts), "subscriptions": subscriptions}

    schedule = sorted(({"at": _seconds_after_t0(elapsed, lead, f"node {s.index}'s publish on {topic}"),
                        "node": s.index, "topic": topic, "size": size}
                       for s in scripts for elapsed, topic, size in s.publishes), key=lambda p: (p["at"], p["node"]))
    if not schedule:
        raise ValueError("the script publishes nothing")
    workload = {k: v for k, v in sc.get("workload", {}).items() if k not in DRAWN}
    first, last = schedule[0]["at"], schedule[-1]["at"]
    if window and window[0] <= first and last <= window[0] + window[1]:
        workload.update(warmup=window[0], duration=window[1], drain=window[2])
    else:
        workload.update(warmup=first, duration=max(1.0, last - first), drain=window[2] if window else DEFAULT_DRAIN)
    workload["schedule"] = schedule
    sc["workload"] = workload
    sc.pop("matrix", None)
    first_keys = ("name", "seed", "nodes", "protocol", "topology", "network", "topics", "workload")
    return {**{k: sc[k] for k in first_keys if k in sc}, **{k: v for k, v in sc.items() if k not in first_keys}}

