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


IW_SEGMENTS = 10      # Linux's initial congestion window (RFC 6928)


class TcpWindow:
    """One direction of a connection's congestion window, as Linux's TCP grows it without loss: a
    cold connection starts at IW_SEGMENTS segments and slow start doubles the window each round trip
    while the sender fills it. A frame larger than the window needs extra round trips: what a real
    round trip costs a 50 KB message on a fresh connection (three flights at 100 ms one way), and what
    the simulator had left out (docs/simulation.md).

    A window not used decays by Linux's two rules: a send after more than an RTO without any halves it
    for each RTO of the gap (tcp_cwnd_restart); a send while the window has gone unused for an RTO
    or more halves it once, towards the initial window (congestion window validation, RFC 2861,
    tcp_cwnd_application_limited), so small frames (IDONTWANT, IHAVE) slow the decay between large
    messages but do not stop it. "Used": a send of at least half the window (Linux counts a window in
    slow start as used when half of it is in flight). Not modelled: loss recovery, the receiver's
    window, fair sharing between connections."""
    __slots__ = ("cwnd", "last_sent", "last_used")

    def __init__(self) -> None:
        self.cwnd = IW_SEGMENTS * MSS
        self.last_sent = float("-inf")
        self.last_used = float("-inf")

    def _decay(self, now: float, rto: float) -> None:
        restart = IW_SEGMENTS * MSS
        idle = now - self.last_sent
        if idle > rto:
            while idle > rto and self.cwnd > restart:
                self.cwnd = max(restart, self.cwnd // 2)
                idle -= rto
            self.last_used = now
        elif now - self.last_used >= rto:
            self.cwnd = max(restart, (self.cwnd + restart) // 2)
            self.last_used = now

    def send_time(self, payload_bytes: int, now: float, rtt: float, rto: float, rate: float) -> float:
        """Seconds from `now` until the last byte of a frame of `payload_bytes` has left, at `rate`
        bytes/s: each full window is a flight, and the next flight waits for its acknowledgements (a
        round trip, or the flight's own serialisation once the window exceeds the path's capacity).
        The window grows, or decays after going unused, as Linux's would."""
        self._decay(now, rto)
        left, window, elapsed = payload_bytes, self.cwnd, 0.0
        while left > window:
            left -= window
            elapsed += max(rtt, window / rate)
            window *= 2
        if elapsed or left == window:  # the window was filled: slow start grows it by what was acked
            self.cwnd = window + left
        elapsed += left / rate
        self.last_sent = now + elapsed
        if elapsed > left / rate or 2 * payload_bytes >= self.cwnd:
            self.last_used = now + elapsed
        return elapsed
