"""A peerlab node's config as a gossipsub-interop instruction script, and the message ids both sides use.

A gossipsub-interop binary learns everything from one script (`{"script": [...]}`): its GossipSub
parameters (go-libp2p-pubsub's names, times in nanoseconds), whom to connect to, what to subscribe to,
and when to publish what, every time a whole number of seconds after the binary's own start
(`waitUntil`). So a peerlab schedule must fall on whole seconds from T0, and the binary must start a
whole number of seconds before T0 (the shim does that: node/interop/shim.py).

A message's id is its first 8 bytes, a big-endian uint64, logged in base 10. peerlab's message
`<node>-<seq>` of `size` bytes gets the id `origin << 40 | seq << 24 | size`, so any node that receives
a copy knows the peerlab message, its origin and its size from the id alone.
"""
from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any, Iterable

from node.ids import node_id, node_index

SCHEMA_PATH = Path(__file__).with_name("instructions.schema.json")

# peerlab's GossipSub parameter (docs/protocols/gossipsub.md) -> (GossipSubParams field, seconds -> ns?)
PARAMS: dict[str, tuple[str, bool]] = {  # (and `validation`, whose delay is setTopicValidationDelay)
    "D": ("D", False), "D_lo": ("Dlo", False), "D_hi": ("Dhi", False), "D_lazy": ("Dlazy", False),
    "D_out": ("Dout", False), "D_score": ("Dscore", False),
    "heartbeat_interval": ("HeartbeatInterval", True), "heartbeat_initial_delay": ("HeartbeatInitialDelay", True),
    "fanout_ttl": ("FanoutTTL", True), "history_length": ("HistoryLength", False),
    "history_gossip": ("HistoryGossip", False), "gossip_factor": ("GossipFactor", False),
    "gossip_retransmission": ("GossipRetransmission", False), "prune_peers": ("PrunePeers", False),
    "prune_backoff": ("PruneBackoff", True), "unsubscribe_backoff": ("UnsubscribeBackoff", True),
    "graft_flood_threshold": ("GraftFloodThreshold", True),
    "opportunistic_graft_ticks": ("OpportunisticGraftTicks", False),
    "opportunistic_graft_peers": ("OpportunisticGraftPeers", False),
    "max_ihave_length": ("MaxIHaveLength", False), "max_ihave_messages": ("MaxIHaveMessages", False),
    "iwant_followup_time": ("IWantFollowupTime", True), "idontwant_threshold": ("IDontWantMessageThreshold", False),
    "idontwant_ttl": ("IDontWantMessageTTL", False), "max_idontwant_length": ("MaxIDontWantLength", False),
    "max_idontwant_messages": ("MaxIDontWantMessages", False),
}
NS = 1_000_000_000

ORIGIN_SHIFT, SEQ_SHIFT = 40, 24
MAX_ORIGIN, MAX_SEQ, MAX_SIZE = (1 << 24) - 1, (1 << 16) - 1, (1 << 24) - 1
MIN_SIZE = 8  # the id is the first 8 bytes


def message_id(origin: str, seq: int, size: int) -> int:
    """The interop id of peerlab's message `<origin>-<seq>` of `size` bytes."""
    index = node_index(origin)
    if not (0 <= index <= MAX_ORIGIN and 0 <= seq <= MAX_SEQ and MIN_SIZE <= size <= MAX_SIZE):
        raise ValueError(f"message {origin}-{seq} of {size} bytes has no gossipsub-interop id: the id holds "
                         f"node indexes up to {MAX_ORIGIN}, {MAX_SEQ + 1} messages per node and sizes of "
                         f"{MIN_SIZE} B to {MAX_SIZE} B")
    return index << ORIGIN_SHIFT | seq << SEQ_SHIFT | size


def message_of(interop_id: int) -> tuple[str, str, int]:
    """(peerlab msg_id, origin node, size) of an interop id that message_id made."""
    origin = node_id(interop_id >> ORIGIN_SHIFT)
    return f"{origin}-{(interop_id >> SEQ_SHIFT) & MAX_SEQ}", origin, interop_id & MAX_SIZE


def validation_delay(params: dict[str, Any]) -> float:
    """The seconds of `validation.delay` (the contract's setTopicValidationDelay); only `rule: accept`."""
    validation = params.get("validation") or {}
    if (validation.get("rule", "accept") != "accept" or validation.get("origins") or validation.get("max_size")
            or validation.get("work", "sleep") != "sleep"):
        raise ValueError("protocol.params.validation: a gossipsub-interop binary takes only a delay it waits "
                         "(setTopicValidationDelay), with rule accept and work sleep")
    return float(validation.get("delay", 0.0))


def gossipsub_params(params: dict[str, Any]) -> dict[str, Any]:
    """peerlab's GossipSub parameters as the contract's `gossipSubParams` (validation goes apart:
    validation_delay); one it cannot carry is refused."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name == "validation":
            continue
        if name not in PARAMS:
            raise ValueError(f"protocol.params.{name}: a gossipsub-interop binary takes only go-libp2p-pubsub's "
                             f"GossipSubParams ({', '.join(PARAMS)}) and validation.delay; leave it out")
        field, seconds = PARAMS[name]
        out[field] = round(value * NS) if seconds else value
    return out


def whole_seconds(t: float, what: str) -> int:
    """`t` seconds as the whole number a `waitUntil` takes, or a ValueError naming `what`."""
    if not math.isfinite(t) or abs(t - round(t)) > 1e-6:
        raise ValueError(f"{what} at {t:g} s after T0: a gossipsub-interop binary waits in whole seconds "
                         "(waitUntil.elapsedSeconds), so its schedule and late subscriptions must fall on whole "
                         "seconds (workload.interval, workload.start and late subscription times in whole seconds)")
    return round(t)


def timed_actions(config: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The node's late subscriptions and publishes as (whole seconds after T0, instruction), in time order
    (a subscription before a publish at the same second)."""
    node = config["node_id"]
    actions = [(whole_seconds(t, f"{node}'s late subscription to {topic}"), 0,
                {"type": "subscribeToTopic", "topicID": topic}) for t, topic in config.get("late_subscriptions", [])]
    for seq, (t, topic, size) in enumerate(config.get("schedule", [])):
        actions.append((whole_seconds(t, f"{node}'s message {node}-{seq}"), 1,
                        {"type": "publish", "messageID": message_id(node, seq, max(size, MIN_SIZE)),
                         "messageSizeBytes": max(size, MIN_SIZE), "topicID": topic}))
    return [(t, action) for t, _, action in sorted(actions, key=lambda a: (a[0], a[1]))]


def node_timeline(config: dict[str, Any], t0_after_start: int, connect_at: int) -> list[tuple[int, dict[str, Any]]]:
    """The node's timed actions as (whole seconds after the binary's start, instruction), for a binary
    that starts `t0_after_start` seconds before T0 (negative: after it, as on a restart) and connects
    at `connect_at`: a publish already in the past is left out (a restarted node does not publish the
    past), a late subscription in the past is made when it connects."""
    timeline = []
    for t, action in timed_actions(config):
        elapsed = t0_after_start + t
        if elapsed < connect_at:
            if action["type"] == "publish":
                continue
            elapsed = connect_at
        timeline.append((elapsed, action))
    return timeline


def setup(config: dict[str, Any]) -> list[dict[str, Any]]:
    """A node's first instructions: GossipSub with its parameters, the validation delay on every topic
    it will subscribe to, its subscriptions at start."""
    script: list[dict[str, Any]] = [{"type": "initGossipSub", "gossipSubParams": gossipsub_params(config["params"])}]
    delay = validation_delay(config["params"])
    topics = [*config.get("subscriptions", []), *(t for _, t in config.get("late_subscriptions", []))]
    if delay:
        script += [{"type": "setTopicValidationDelay", "topicID": t, "delaySeconds": delay} for t in dict.fromkeys(topics)]
    return script + [{"type": "subscribeToTopic", "topicID": t} for t in config.get("subscriptions", [])]


def run_end(t0_after_start: int, end_s: float) -> int:
    """The whole second of the binary's clock at which the run is over (T0 + warm-up, publishing and
    drain, `end_s`, rounded up): its script's last `waitUntil`. A gossipsub-interop binary exits when its
    script ends, so a script that ended at its last publish or connect would take the node out of the
    network while the others still relay, and fail the dials of peers that come later."""
    return t0_after_start + math.ceil(end_s - 1e-9)


def node_script(config: dict[str, Any], t0_after_start: int, connect_at: int, end_s: float) -> list[dict[str, Any]]:
    """The script of one node (node_timeline's arguments): set up, connect, its timed actions, then a
    wait to the run's end (`end_s` seconds after T0: run_end)."""
    script = setup(config)
    if config.get("dial"):
        script += [{"type": "waitUntil", "elapsedSeconds": connect_at},
                   {"type": "connect", "connectTo": [node_index(p) for p in config["dial"]]}]
    for elapsed, action in node_timeline(config, t0_after_start, connect_at):
        script += [{"type": "waitUntil", "elapsedSeconds": elapsed}, action]
    return script + [{"type": "waitUntil", "elapsedSeconds": max(run_end(t0_after_start, end_s), connect_at)}]


def experiment(configs: Iterable[dict[str, Any]], t0_after_start: int, connect_at: int,
               end_s: float) -> dict[str, Any]:
    """The whole experiment as one script every node runs (the form gossipsub-interop's own experiments
    take): each node's own part under `ifNodeIDEquals`, the waits shared and in time order, and a last
    `waitUntil` at the run's end (`end_s` seconds after T0: run_end), as their runner ends every
    experiment, since each binary exits when the script is over."""
    configs = sorted(configs, key=lambda c: node_index(c["node_id"]))
    script: list[dict[str, Any]] = []
    for c in configs:
        script += [only(node_index(c["node_id"]), instruction) for instruction in setup(c)]
    script.append({"type": "waitUntil", "elapsedSeconds": connect_at})
    script += [only(node_index(c["node_id"]), {"type": "connect", "connectTo": [node_index(p) for p in c["dial"]]})
               for c in configs if c.get("dial")]
    timed = sorted(((t0_after_start + t, node_index(c["node_id"]), k, action) for c in configs
                    for k, (t, action) in enumerate(timed_actions(c))), key=lambda a: a[:3])
    waited = connect_at
    for elapsed, i, _, action in timed:
        if elapsed > waited:
            script.append({"type": "waitUntil", "elapsedSeconds": elapsed})
            waited = elapsed
        script.append(only(i, action))
    script.append({"type": "waitUntil", "elapsedSeconds": max(run_end(t0_after_start, end_s), waited)})
    return {"script": script}


def only(node: int, instruction: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ifNodeIDEquals", "nodeID": node, "instruction": instruction}


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def problems(params: dict[str, Any]) -> list[str]:
    """What in a params.json does not follow the contract's instruction schema (empty: it does), each
    named by its place (`script/3/instruction/gossipSubParams/D`). An instruction is checked against
    the definition its `type` names, so the problem named is inside it, not "matches no instruction"."""
    import jsonschema  # the orchestrator's imports, not the node's

    root = jsonschema.Draft202012Validator(schema())
    defs = schema()["$defs"]
    found: list[str] = []

    def check(instance: Any, subschema: dict[str, Any], where: list[str]) -> None:
        for e in sorted(root.evolve(schema=subschema).iter_errors(instance), key=lambda e: list(map(str, e.path))):
            place = [*where, *map(str, e.absolute_path)]
            kind = e.instance.get("type") if isinstance(e.instance, dict) else None
            if e.validator == "oneOf" and isinstance(kind, str) and kind in defs and "type" in defs[kind].get("required", ()):
                check(e.instance, {"$ref": f"#/$defs/{kind}"}, place)
            elif e.validator == "oneOf":
                found.append(f"{'/'.join(place)}: not an instruction (its type: one of "
                             f"{', '.join(k for k, d in defs.items() if 'type' in d.get('required', ()))})")
            else:
                found.append(f"{'/'.join(place) or '(top)'}: {e.message}")

    check(params, schema(), [])
    return found
