"""The node contract, version 1: what any node peerlab runs is given and must do, whoever wrote it.

A node is launched as a process (a command on the local backend) with `--config FILE`, a JSON object
valid against `ContractConfig` (`peerlab contract schema config` prints its JSON Schema). It listens
on `listen`, takes the identity derived from `identity_seed` (an Ed25519 seed, so the planner knows
every peer id in advance: `peer_ids`), dials the nodes in `dial` (address and peer id in `peers`),
subscribes to `subscriptions` at once and to `late_subscriptions` at T0 + offset, publishes the
`schedule` from T0 (`t0_ns`, unix ns on its own clock), and writes the contract's events
(`REQUIRED_EVENTS`, fields as in node/events.schema.json) as JSON lines to `event_log`. A message's
payload is its id, a newline, then filler up to its size; its id (the message-id function every
implementation must use, so that mixed networks agree) is the payload up to the first newline.
The run ends `end_s` seconds after T0; a node that exits on its own before then fails the run.
SIGTERM stops the node (it logs `stop` and exits 0); SIGKILL kills it; a restart relaunches the same
command with the same config, and the node skips the publishes whose time has passed.

peerlab's own node is the first implementation: its `NodeConfig` (node/config.py) extends this one.
The full text is docs/node-contract.md.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from node import identity
from node.identity import identity_seed  # noqa: F401  (the contract's name for it)

CONTRACT_VERSION = 1

# the events a node must write (every one it writes must be valid against node/events.schema.json)
REQUIRED_EVENTS = ("start", "ready", "t0", "connect", "disconnect", "join", "publish_message",
                   "deliver_message", "duplicate_message", "stop")
OPTIONAL_EVENTS = ("behaviour", "send_rpc", "recv_rpc", "graft", "prune", "resources", "publish_refused")


class Address(BaseModel):
    host: str
    port: int = Field(..., ge=0, le=65535)
    peer_id: str | None = Field(None, description="the peer's libp2p peer id (from its identity seed)")


class ContractConfig(BaseModel):
    """The config every node is given."""

    model_config = ConfigDict(extra="forbid")

    contract: int = Field(CONTRACT_VERSION, description="the contract version this config follows")
    run_id: str
    node_id: str
    protocol: str
    implementation: str = Field("peerlab", description="whose code runs this node (peerlab or an adapter)")
    params: dict[str, Any] = Field(default_factory=dict, description="protocol parameters, peerlab's names")
    seed: int = Field(0, description="the run's seed")
    identity_seed: str = Field("", description="32 bytes, hex: the node's Ed25519 identity seed")
    peer_ids: dict[str, str] = Field(default_factory=dict, description="node id -> peer id, for every node "
                                     "whose messages it may see (to log origins and senders by node id)")
    listen: Address
    peers: dict[str, Address] = Field(default_factory=dict, description="data-plane address of every peer "
                                      "it may contact (its neighbours, or every node)")
    dial: list[str] = Field(default_factory=list, description="neighbours this node connects to")
    neighbours: list[str] = Field(default_factory=list)
    subscriptions: list[str] = Field(default_factory=list)
    late_subscriptions: list[tuple[float, str]] = Field(default_factory=list,
                                                        description="(seconds after T0, topic) to subscribe")
    schedule: list[tuple[float, str, int]] = Field(default_factory=list,
                                                   description="(seconds after T0, topic, payload bytes)")
    t0_ns: int | None = Field(None, description="T0 in unix ns on the node's clock; peerlab's own node may "
                              "also be given it later through its control API")
    connect_at_ns: int | None = Field(None, description="for a node that dials each peer once at a fixed time (a "
                                      "gossipsub-interop binary): when, unix ns on its clock; every peer "
                                      "listens by then, and it leaves time to dial them all by T0")
    end_s: float | None = Field(None, ge=0, description="seconds after T0 at which the run ends (warm-up, "
                                "publishing and drain): the node is stopped then (SIGTERM), and must not "
                                "exit on its own before it")
    event_log: str = Field(..., description="where the node appends its events (JSON lines)")
    resources_interval: float = Field(1.0, ge=0, description="seconds between `resources` events, the "
                                      "process's CPU time and RSS (0: none; optional for an implementation)")


def peer_id(seed_hex: str) -> str:
    """The libp2p peer id of an Ed25519 identity (node/identity.py) in base58btc (the `12D3KooW...` form)."""
    import base58  # the orchestrator's imports, not the node image's

    return base58.b58encode(identity.peer_id_bytes(identity.signing_key(seed_hex))).decode()


_JSON_TYPES = {"long": "integer", "string": "string", "boolean": "boolean", "double": "number"}


def config_schema() -> dict[str, Any]:
    """JSON Schema of the config every node is given."""
    schema = ContractConfig.model_json_schema()
    schema["title"] = f"peerlab node contract v{CONTRACT_VERSION}: node config"
    return schema


def events_schema() -> dict[str, Any]:
    """JSON Schema of one line of a contract node's event log: the required and optional events, each
    with its fields as node/events.schema.json types them (all of a required event's fields must be
    there; an optional event may leave out what the implementation cannot tell, like per-type bytes)."""
    from node.eventlog import load_schema

    source = load_schema()
    kinds = []
    for kind in (*REQUIRED_EVENTS, *OPTIONAL_EVENTS):
        spec = source["events"][kind]
        fields = {**source["common"], **{f: source["fields"][f] for f in spec["fields"]}}
        properties = {name: {"type": _JSON_TYPES[t]} for name, t in fields.items()}
        properties["type"] = {"const": kind}
        kinds.append({"title": kind, "description": spec["doc"], "type": "object", "properties": properties,
                      "required": list(fields) if kind in REQUIRED_EVENTS else list(source["common"]),
                      "additionalProperties": False})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"peerlab node contract v{CONTRACT_VERSION}: one event (a line of the event log)",
            "description": "required events: " + ", ".join(REQUIRED_EVENTS) + "; optional: "
                           + ", ".join(OPTIONAL_EVENTS) + ". ts: unix ns; node: the node id.",
            "oneOf": kinds}


def check_log(lines: list[str]) -> list[str]:
    """Problems of an event log against the contract: invalid lines, and required events never written
    (`disconnect` and `duplicate_message` may legitimately not happen). Empty: it conforms."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(events_schema())
    by_type = {s["title"]: jsonschema.Draft202012Validator(s) for s in events_schema()["oneOf"]}
    problems, seen = [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as err:
            problems.append(f"line {number}: not JSON ({err})")
            continue
        kind = event.get("type") if isinstance(event, dict) else None
        if kind not in by_type:
            if not validator.is_valid(event):
                problems.append(f"line {number}: unknown event type {kind!r}")
            continue
        seen.add(kind)
        for error in by_type[kind].iter_errors(event):
            where = ".".join(map(str, error.path)) or "(event)"
            problems.append(f"line {number} ({kind}): {where}: {error.message}")
    for kind in REQUIRED_EVENTS:
        if kind not in seen and kind not in ("disconnect", "duplicate_message", "publish_message",
                                              "deliver_message"):
            problems.append(f"no {kind!r} event")
    return problems
