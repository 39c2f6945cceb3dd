"""Kademlia's keys and routing table: 256-bit keys (a node's is SHA-256 of its id), XOR distance, one
k-bucket per distance bit with least recently seen first and a replacement cache, and the closest
contacts to a key. The protocol around them is node/protocols/dht/kademlia.py."""
from __future__ import annotations

import hashlib
from typing import Any

KEY_BITS = 256


_KEYS: dict[str, int] = {}


def node_key(node_id: str) -> int:
    """The 256-bit Kademlia key of a node: SHA-256 of its id."""
    key = _KEYS.get(node_id)
    if key is None:
        key = _KEYS[node_id] = int.from_bytes(hashlib.sha256(node_id.encode()).digest(), "big")
    return key


def content_key(data: bytes | str) -> int:
    """The key under which content (a descriptor, a name, an attribute) is found."""
    return int.from_bytes(hashlib.sha256(data.encode() if isinstance(data, str) else data).digest(), "big")


def to_bytes(key: int) -> bytes:
    return key.to_bytes(32, "big")


def from_bytes(raw: bytes) -> int:
    if len(raw) != 32:
        raise ValueError(f"a key is 32 bytes, got {len(raw)}")
    return int.from_bytes(raw, "big")


def closest(key: int, peers: Any, n: int) -> list[str]:
    """The n of `peers` (node ids) closest to `key`, closest first."""
    keys = _KEYS  # node_key's cache, read directly: this sort is the DHT's hottest loop
    return sorted(peers, key=lambda p: (keys.get(p) or node_key(p)) ^ key)[:n]


class RoutingTable:
    def __init__(self, own: int, k: int):
        self.own = own
        self.k = k
        self.buckets: list[list[str]] = [[] for _ in range(KEY_BITS)]
        self.replacements: list[list[str]] = [[] for _ in range(KEY_BITS)]
        self._where: dict[str, int] = {}

    def index(self, key: int) -> int:
        """The bucket of a key: the position of the highest bit in which it differs from ours."""
        return (key ^ self.own).bit_length() - 1

    def __contains__(self, peer: str) -> bool:
        return peer in self._where

    def __len__(self) -> int:
        return len(self._where)

    def peers(self) -> list[str]:
        return list(self._where)

    def seen(self, peer: str) -> str | None:
        """`peer` was heard from: it moves to the tail of its bucket, or joins it. A full bucket returns
        its oldest contact, to be pinged (the newcomer waits among the replacements)."""
        key = node_key(peer)
        if key == self.own:
            return None
        i = self.index(key)
        bucket = self.buckets[i]
        if peer in self._where:
            bucket.remove(peer)
            bucket.append(peer)
            return None
        if len(bucket) < self.k:
            bucket.append(peer)
            self._where[peer] = i
            return None
        spare = self.replacements[i]
        if peer in spare:
            spare.remove(peer)
        spare.append(peer)
        del spare[:-self.k]
        return bucket[0]

    def remove(self, peer: str) -> None:
        """`peer` failed: it leaves, and the freshest replacement takes its place."""
        i = self._where.pop(peer, None)
        if i is None:
            for spare in self.replacements:
                if peer in spare:
                    spare.remove(peer)
            return
        self.buckets[i].remove(peer)
        if self.replacements[i]:
            newcomer = self.replacements[i].pop()
            self.buckets[i].append(newcomer)
            self._where[newcomer] = i

    def closest(self, key: int, n: int) -> list[str]:
        return closest(key, self._where, n)
