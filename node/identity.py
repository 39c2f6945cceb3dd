"""Node identities: every node's Ed25519 key, derived from the run's seed and its node id, and its libp2p
peer id (the identity multihash of the protobuf-encoded public key, as go-, js- and py-libp2p derive it
from the same key). Cores use them to put real peer ids and signatures on the wire, and to map a peer id
back to the node that owns it."""
from __future__ import annotations

import hashlib
from typing import Callable, Iterable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

# PublicKey{Type: Ed25519 (1), Data: 32 bytes} in protobuf, behind an identity multihash (code 0, length 36)
_KEY_PB_PREFIX = b"\x08\x01\x12\x20"
_PEER_ID_PREFIX = b"\x00\x24" + _KEY_PB_PREFIX
PEER_ID_LENGTH = len(_PEER_ID_PREFIX) + 32


def identity_seed(run_seed: int, node_id: str) -> str:
    """The node's Ed25519 seed (hex): the same for a node across restarts and runs with the same seed."""
    return hashlib.sha256(f"peerlab-identity:{run_seed}:{node_id}".encode()).hexdigest()


def signing_key(seed_hex: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex))


def peer_id_bytes(key: Ed25519PrivateKey) -> bytes:
    """The binary peer id of an Ed25519 key (38 bytes; base58btc of it is the `12D3KooW...` form)."""
    return _PEER_ID_PREFIX + key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_key(peer_id: bytes) -> Ed25519PublicKey | None:
    """The Ed25519 public key inlined in a peer id, or None if the peer id does not inline one."""
    if len(peer_id) != PEER_ID_LENGTH or not peer_id.startswith(_PEER_ID_PREFIX):
        return None
    return Ed25519PublicKey.from_public_bytes(peer_id[len(_PEER_ID_PREFIX):])


def verify(peer_id: bytes, signature: bytes, data: bytes) -> bool:
    key = public_key(peer_id)
    if key is None:
        return False
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


class Identities:
    """The identities of a run's nodes, derived on demand. `nodes` returns the node ids of the run (called
    when a peer id is not yet known, so that nodes added later are found too)."""

    def __init__(self, run_seed: int, nodes: Callable[[], Iterable[str]]):
        self.run_seed = run_seed
        self._nodes = nodes
        self._keys: dict[str, Ed25519PrivateKey] = {}
        self._peer_ids: dict[str, bytes] = {}
        self._node_of: dict[bytes, str] = {}

    def key(self, node: str) -> Ed25519PrivateKey:
        key = self._keys.get(node)
        if key is None:
            key = self._keys[node] = signing_key(identity_seed(self.run_seed, node))
            pid = self._peer_ids[node] = peer_id_bytes(key)
            self._node_of[pid] = node
        return key

    def peer_id(self, node: str) -> bytes:
        if node not in self._peer_ids:
            self.key(node)
        return self._peer_ids[node]

    def node_of(self, peer_id: bytes) -> str | None:
        """The node owning `peer_id`, or None if no node of the run does."""
        node = self._node_of.get(peer_id)
        if node is None:
            for other in self._nodes():
                if other not in self._keys:
                    self.key(other)
            node = self._node_of.get(peer_id)
        return node
