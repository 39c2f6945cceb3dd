"""The TCP connections of a gossipsub-interop node, read from the kernel: the contract logs none, and
peerlab's runner follows `connect` and `disconnect`. The node's network namespace is the reader's, so
/proc/net/tcp lists exactly its sockets; a connection to or from port 9000 (where every such binary
listens) at a known peer's address is a connection to that peer."""
from __future__ import annotations

import socket
import struct
from pathlib import Path

PORT = 9000
ESTABLISHED = "01"


def _endpoint(field: str) -> tuple[str, int]:
    address, port = field.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(address, 16))), int(port, 16)


def established(table: str) -> dict[str, bool]:
    """Peer address -> outbound (we dialled it), for every established connection on PORT in a
    /proc/net/tcp text."""
    found: dict[str, bool] = {}
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != ESTABLISHED:
            continue
        (_, local_port), (remote, remote_port) = _endpoint(fields[1]), _endpoint(fields[2])
        if remote_port == PORT and local_port != PORT:
            found.setdefault(remote, True)
        elif local_port == PORT:
            found.setdefault(remote, False)
    return found


class Connections:
    """The changes since the last look: peers connected (with direction) and peers gone."""

    def __init__(self, peers: dict[str, str], table: Path = Path("/proc/net/tcp")):
        self.peers = peers       # address -> node id
        self.table = table
        self.up: set[str] = set()

    def changes(self) -> tuple[list[tuple[str, bool]], list[str]]:
        now = {self.peers[a]: outbound for a, outbound in established(self.table.read_text()).items()
               if a in self.peers}
        connected = [(peer, now[peer]) for peer in sorted(set(now) - self.up)]
        gone = sorted(self.up - set(now))
        self.up = set(now)
        return connected, gone
