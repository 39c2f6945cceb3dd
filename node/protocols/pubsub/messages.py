"""How a libp2p pubsub message is authored, named and checked (go-libp2p-pubsub's pubsub.go and
sign.go): the `from` field, the message id on the wire, and the StrictSign signature.

Schemes (`msg_id`):
- `from-seqno`, libp2p's default id: `from || seqno`, where `from` is the origin's binary peer id
  (38 bytes for the Ed25519 identities of node/identity.py) and seqno 8 bytes: 46 bytes per id;
- `hash`: the first 20 bytes of SHA-256 of the data (a content id, as Ethereum's consensus layer uses);
- `short`: peerlab's earlier compact form, `from` = the node id and the id `<node>-<seqno>` in text,
  never signed; only where a scenario asks for it.

With `sign` (StrictSign, go's default), every message is signed with its origin's key over
"libp2p-pubsub:" + the message without signature and key; the key itself is not attached, as go does
for identities whose peer id inlines the public key. Unsigned messages are rejected before the seen
check, badly signed ones after it (go's checkSigningPolicy and validation pipeline).

Inside a core and in the event log a message id is a *label* that does not depend on the scheme's bytes:
`<node>-<seqno>` for from-seqno and short, the hash in hex for hash, and `?<hex of the wire id>` for an
id of no known origin. `to_wire` and `from_wire` convert between the two, one-to-one.
"""
from __future__ import annotations

import hashlib
from typing import Literal

from node import identity
from node.identity import Identities
from node.protocols.pubsub.pubsub_pb2 import Message
from node.protocols.pubsub.wire import default_msg_id

SIGN_PREFIX = b"libp2p-pubsub:"
HASH_ID_BYTES = 20
Scheme = Literal["from-seqno", "hash", "short"]


class MessageIds:
    def __init__(self, node_id: str, scheme: Scheme, sign: bool, identities: Identities | None):
        if scheme != "short" and identities is None:
            raise ValueError(f"message ids {scheme!r} need the run's identities")
        self.node_id = node_id
        self.scheme = scheme
        self.sign = sign
        self.identities = identities

    # peers -----------------------------------------------------------------------------------------
    def peer_id(self, node: str) -> bytes:
        """How `node` is named on the wire (`from`, PX): its binary peer id, or its node id in `short`."""
        return node.encode() if self.scheme == "short" else self.identities.peer_id(node)

    def node_of(self, peer_id: bytes) -> str | None:
        if self.scheme == "short":
            return peer_id.decode(errors="replace")
        return self.identities.node_of(peer_id)

    # authoring -----------------------------------------------------------------------------------
    def author(self, seqno: int, topic: str, data: bytes) -> Message:
        """A message from this node: `from`, seqno, topic and data, signed if the policy says so."""
        origin = self.peer_id(self.node_id)
        msg = Message(**{"from": origin, "seqno": seqno.to_bytes(8, "big"), "topic": topic, "data": data})
        if self.sign:
            msg.signature = self.identities.key(self.node_id).sign(SIGN_PREFIX + msg.SerializeToString())
        return msg

    # naming --------------------------------------------------------------------------------------
    def origin(self, msg: Message) -> str:
        """The node that authored `msg` (`?<hex>` for a `from` no node of the run owns)."""
        raw = getattr(msg, "from")
        node = self.node_of(raw)
        return node if node is not None else "?" + raw.hex()

    def label(self, msg: Message) -> str:
        if self.scheme == "hash":
            return hashlib.sha256(msg.data).digest()[:HASH_ID_BYTES].hex()
        if self.scheme == "short":
            return default_msg_id(msg)
        return self.from_wire(getattr(msg, "from") + msg.seqno)

    def wire_id(self, msg: Message) -> bytes:
        return self.to_wire(self.label(msg))

    def to_wire(self, label: str) -> bytes:
        if self.scheme == "short":
            return label.encode()
        if label.startswith("?") or self.scheme == "hash":
            return bytes.fromhex(label.lstrip("?"))
        node, seqno = label.rsplit("-", 1)
        return self.identities.peer_id(node) + int(seqno).to_bytes(8, "big")

    def from_wire(self, raw: bytes) -> str:
        if self.scheme == "short":
            return raw.decode(errors="replace")
        if self.scheme == "hash":
            return raw.hex() if len(raw) == HASH_ID_BYTES else "?" + raw.hex()
        node = self.identities.node_of(raw[:-8]) if len(raw) == identity.PEER_ID_LENGTH + 8 else None
        return f"{node}-{int.from_bytes(raw[-8:], 'big')}" if node is not None else "?" + raw.hex()

    # checking ------------------------------------------------------------------------------------
    def unsigned(self, msg: Message) -> bool:
        """StrictSign refuses a message without a signature before it even names it."""
        return self.sign and not msg.signature

    def signature_valid(self, msg: Message) -> bool:
        """The signature is the `from` peer's over the message without signature and key."""
        if not self.sign:
            return True
        bare = Message()
        bare.CopyFrom(msg)
        bare.ClearField("signature")
        bare.ClearField("key")
        return identity.verify(getattr(msg, "from"), msg.signature, SIGN_PREFIX + bare.SerializeToString())
