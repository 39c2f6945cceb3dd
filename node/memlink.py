"""A node's access link in virtual time, for the discrete-event network (node/memnet.py): frame sizes
on the wire (framing and TCP/IP/Ethernet headers per segment), the upload queues with their
priority lane, the frame on the wire, and the download's horizon."""
from __future__ import annotations

from collections import deque

MSS = 1448            # TCP payload per segment (1500 MTU, timestamps option)
SEGMENT_HEADERS = 66  # Ethernet 14 + IPv4 20 + TCP 32: what HTB counts beside the payload


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def wire_bytes(payload_len: int) -> int:
    """Bytes a protocol frame of `payload_len` occupies on the link: varint length + Frame wrapper
    (node/framing.py) + the TCP/IP/Ethernet headers of its segments."""
    body = 1 + _varint_len(payload_len) + payload_len
    stream = _varint_len(body) + body
    return stream + -(-stream // MSS) * SEGMENT_HEADERS


class AccessLink:
    """A node's access link: the upload queues and the frame on the wire, the download's horizon.

    A frame is committed to the wire when the uplink is free: its arrival is scheduled at once and
    the next frame is taken when it has left (`wake`), so an idle link costs one event per frame."""
    __slots__ = ("up_rate", "down_rate", "normal", "priority", "free_at", "waking", "queued", "wire", "down_free")

    def __init__(self, up_bps: float, down_bps: float):
        self.up_rate = up_bps / 8   # bytes per second
        self.down_rate = down_bps / 8
        self.normal: deque[tuple[str, bytes, int]] = deque()
        self.priority: deque[tuple[str, bytes, int]] = deque()
        self.free_at = 0.0           # when the frame on the wire has left
        self.waking = False          # a wake-up is scheduled at free_at
        self.queued: dict[str, int] = {}            # payload bytes waiting, per peer
        self.wire: tuple[str, int] = ("", 0)        # (peer, payload bytes) of the frame on the wire
        self.down_free = 0.0         # when the downlink has finished what it was given

    def backlog(self, peer: str, now: float) -> int:
        on_wire = self.wire[1] if self.wire[0] == peer and self.free_at > now else 0
        return self.queued.get(peer, 0) + on_wire

    def drop_queued(self) -> int:
        count = len(self.normal) + len(self.priority)
        self.normal.clear()
        self.priority.clear()
        self.queued.clear()
        return count
