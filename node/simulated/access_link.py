"""A node's access link in virtual time, for the discrete-event network (virtual_network.py): frame sizes on
the wire (framing and TCP/IP/Ethernet headers per segment), the uplink shared by the node's
connections with each one's queue and priority lane, and the download queue."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a frame's window and flight; type hints only (tcp_window.py takes MSS from here)
    from node.simulated.tcp_window import Flight, TcpWindow

MSS = 1448            # TCP payload per segment (1500 MTU, timestamps option)
SEGMENT_HEADERS = 66  # Ethernet 14 + IPv4 20 + TCP 32: what HTB counts beside the payload
DOWNLINK_QUEUE_PACKETS = 1000  # the downlink's queue in the emulation (orchestrator/shaping/tc.py's pfifo)
DOWNLINK_QUEUE_BYTES = DOWNLINK_QUEUE_PACKETS * (MSS + SEGMENT_HEADERS)


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def wire_bytes(payload_len: int) -> int:
    """Bytes a protocol frame of `payload_len` occupies on the link: varint length + Frame wrapper
    (node/framing.py) + the TCP/IP/Ethernet headers of its segments."""
    body = 1 + _varint_len(payload_len) + payload_len
    stream = _varint_len(body) + body
    return stream + -(-stream // MSS) * SEGMENT_HEADERS


class Sending:
    """The frame a connection is sending: its bytes left on the wire, in flights of at most its
    congestion window; between two flights the connection waits for acknowledgements and leaves the
    wire to the others."""
    __slots__ = ("payload", "size", "conn", "left", "flight", "on_wire", "flight_payload", "window", "woken",
                 "acks", "tail", "tail_from")

    def __init__(self, payload: bytes, size: int, conn: int, now: float, window: TcpWindow | None):
        self.payload, self.size, self.conn = payload, size, conn
        self.left = float(size)           # wire bytes not yet sent
        self.flight = 0.0                 # wire bytes of the current flight not yet sent
        self.on_wire = False              # a flight is going (else: waiting for acknowledgements)
        self.flight_payload = 0           # payload bytes of the current flight
        self.woken = False                # waiting for acknowledgements, with a wake-up scheduled
        self.acks: Flight | None = None   # the current flight's acknowledgements (with a window)
        self.tail = 0.0                   # wire bytes of the current flight that have left since the last chunk
        self.tail_from = now              # when they began to leave
        self.window = window              # None: no window, the whole frame is one flight

    def next_flight(self, now: float) -> bool:
        """Put the next flight on the wire: what the window has room for of what is left. False if the
        room is less than a segment (the connection's earlier frames fill the window): it goes when
        their acknowledgements come back."""
        ratio = self.size / max(1, len(self.payload))  # wire bytes per payload byte
        payload_left = round(self.left / ratio)
        if self.window is None:
            self.flight_payload = payload_left
        else:
            self.flight_payload = min(payload_left, self.window.room(now))
            if self.flight_payload < min(payload_left, MSS):
                return False
        self.flight = self.left if self.flight_payload >= payload_left else self.flight_payload * ratio
        self.tail = 0.0
        self.tail_from = now
        self.on_wire = True
        return True


class AccessLink:
    """A node's access link: its uplink shared by the connections that have bytes on it, and its
    downlink's queue.

    The uplink is processor sharing, as the kernel's qdisc interleaves the segments of a node's TCP
    connections: each connection with a flight to send gets an equal share of the upload rate; a
    connection waiting for acknowledgements takes none. A connection's frames go one after another,
    its priority lane first. `advance` charges the time since the last change to the flights.

    The downlink is a FIFO queue at the download rate that the bytes of every sender's flights join
    as they arrive (`take`), a chunk at a time (what a flight sent between two changes of its
    uplink's sharing), so flights arriving at once from several senders queue behind each other."""
    __slots__ = ("up_rate", "down_rate", "sending", "active", "waiting", "updated", "wake", "queued",
                 "down_backlog", "down_updated")

    def __init__(self, up_bps: float, down_bps: float):
        self.up_rate = up_bps / 8   # bytes per second
        self.down_rate = down_bps / 8
        self.sending: dict[str, Sending] = {}   # peer -> the frame its connection is sending
        self.active = 0                         # how many of them have a flight on the wire
        # peer -> (priority lane, normal lane) of frames waiting behind the one being sent
        self.waiting: dict[str, tuple[deque[tuple[bytes, int]], deque[tuple[bytes, int]]]] = {}
        self.updated = 0.0           # when the flights' bytes left were last charged
        self.wake: tuple[int, float] | None = None  # the scheduled wake-up at a flight's end: (handle, when)
        self.queued: dict[str, int] = {}            # payload bytes waiting, per peer
        self.down_backlog = 0.0      # wire bytes in the downlink's queue at `down_updated`
        self.down_updated = 0.0

    def advance(self, now: float) -> None:
        """Charge the wire time since the last change to the flights on the wire, in equal shares."""
        if self.active and now > self.updated:
            share = (now - self.updated) * self.up_rate / self.active
            for frame in self.sending.values():
                if frame.on_wire:
                    frame.flight -= share
                    frame.left -= share
                    frame.tail += share
        self.updated = now

    def take(self, now: float, size: float, spread: float) -> tuple[float, float, float]:
        """`size` wire bytes have reached the downlink over the last `spread` seconds (a chunk); the
        queue drains at the download rate (an empty one lets bytes through as they come, cut-through)
        and holds at most DOWNLINK_QUEUE_BYTES (a full one drops what comes, as the pfifo does): how
        long the chunk's first byte waited for the queue ahead of it, how long its last byte waits from
        now (seconds), and how many of its bytes were dropped."""
        start = max(now - spread, self.down_updated)
        drained = (start - self.down_updated) * self.down_rate
        before = self.down_backlog - drained if self.down_backlog > drained else 0.0
        after = before + size - (now - start) * self.down_rate
        dropped = 0.0
        if after > DOWNLINK_QUEUE_BYTES:
            dropped, after = after - DOWNLINK_QUEUE_BYTES, DOWNLINK_QUEUE_BYTES
        self.down_backlog = after if after > 0.0 else 0.0
        self.down_updated = now
        return before / self.down_rate, self.down_backlog / self.down_rate, dropped

    def queue_wait(self, now: float) -> float:
        """How long a byte reaching the downlink now waits for the queue ahead of it (seconds)."""
        left = self.down_backlog - (now - self.down_updated) * self.down_rate
        return left / self.down_rate if left > 0.0 else 0.0

    def next_end(self) -> float:
        """Seconds from the last change until the first flight on the wire has left."""
        return min(f.flight for f in self.sending.values() if f.on_wire) * self.active / self.up_rate

    def enqueue(self, peer: str, payload: bytes, size: int, priority: bool) -> None:
        lanes = self.waiting.get(peer)
        if lanes is None:
            lanes = self.waiting[peer] = (deque(), deque())
        lanes[0 if priority else 1].append((payload, size))
        self.queued[peer] = self.queued.get(peer, 0) + len(payload)

    def next_waiting(self, peer: str) -> tuple[bytes, int] | None:
        """The peer's next frame (priority lane first), taken off its queue."""
        lanes = self.waiting.get(peer)
        if lanes is None:
            return None
        payload, size = (lanes[0] or lanes[1]).popleft()
        if not (lanes[0] or lanes[1]):
            del self.waiting[peer]
        left = self.queued[peer] - len(payload)
        if left > 0:
            self.queued[peer] = left
        else:
            del self.queued[peer]
        return payload, size

    def backlog(self, peer: str) -> int:
        """Payload bytes to `peer` not yet sent: those waiting and the frame being sent."""
        sending = self.sending.get(peer)
        return self.queued.get(peer, 0) + (len(sending.payload) if sending else 0)

    def drop_queued(self) -> int:
        """Forget every frame not yet sent (the node crashed); how many."""
        count = len(self.sending) + sum(len(a) + len(b) for a, b in self.waiting.values())
        self.sending.clear()
        self.active = 0
        self.waiting.clear()
        self.queued.clear()
        return count
