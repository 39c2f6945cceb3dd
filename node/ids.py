"""Node ids and the addresses derived from them, in one place: `n<index>` names a node, its index
orders nodes and gives its address in a run's /16 (.0.0 is the network, .0.1 the bridge)."""
from __future__ import annotations

from typing import Iterable


def node_id(index: int) -> str:
    return f"n{index}"


def node_index(node: str) -> int:
    """The index in a node id (`n12` -> 12); also orders topic ids (`t3` -> 3)."""
    return int(node[1:])


def by_index(ids: Iterable[str]) -> list[str]:
    """Ids in index order (n2 before n10)."""
    return sorted(ids, key=node_index)


def address(node: str, second_octet: int = 0) -> str:
    """The node's IPv4 address in 10.<second_octet>.0.0/16: host index + 2, after the network and the
    bridge (a simulation larger than a /16 carries on into the next second octets)."""
    host = node_index(node) + 2
    return f"10.{(second_octet + (host >> 16)) % 256}.{(host >> 8) & 0xFF}.{host & 0xFF}"
