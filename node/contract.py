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
SIGTERM stops the node (it logs `stop` and exits 0); SIGKILL kills it; a restart relaunches the same
command with the same config, and the node skips the publishes whose time has passed.

peerlab's own node is the first implementation: its `NodeConfig` (node/config.py) extends this one.
The full text is docs/node-contract.md.
"""
from __future__ import annotations

import hashlib
from typing import Any

import base58
from pydantic import BaseModel, ConfigDict, Field

CONTRACT_VERSION = 1

# the events a node must write (every one it writes must be valid against node/events.schema.json)
REQUIRED_EVENTS = ("start", "ready", "t0", "connect", "disconnect", "join", "publish_message",
                   "deliver_message", "duplicate_message", "stop")
OPTIONAL_EVENTS = ("behaviour", "send_rpc", "recv_rpc", "graft", "prune", "resources")


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
    event_log: str = Field(..., description="where the node appends its events (JSON lines)")


def identity_seed(run_seed: int, node_id: str) -> str:
    """The node's Ed25519 seed: the same for a node across restarts and runs with the same seed."""
    return hashlib.sha256(f"peerlab-identity:{run_seed}:{node_id}".encode()).hexdigest()


def peer_id(seed_hex: str) -> str:
    """The libp2p peer id of an Ed25519 identity: the identity multihash of its protobuf public key,
    in base58btc (the `12D3KooW...` form)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex)).public_key()
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_pb = b"\x08\x01\x12\x20" + raw           # PublicKey{Type: Ed25519, Data: raw}
    multihash = b"\x00" + bytes([len(key_pb)]) + key_pb  # identity hash
    return base58.b58encode(multihash).decode()

