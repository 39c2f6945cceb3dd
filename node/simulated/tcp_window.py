"""TCP's congestion window in virtual time, one per direction of a connection of the discrete-event
network (uplinks.py), and TCP's minimum retransmission timeout."""
from __future__ import annotations

from collections import deque

from node.simulated.access_link import MSS

RTO_MIN = 0.2         # Linux TCP's minimum retransmission timeout
IW_SEGMENTS = 10      # Linux's initial congestion window (RFC 6928)


class TcpWindow:
    """One direction of a connection's congestion window, as Linux's TCP grows it without loss: a
    cold connection starts at IW_SEGMENTS segments and slow start grows the window by each flight
    acknowledged while the window was in use (doubling per round trip). The window counts the bytes in
    flight, whichever frame they belong to: a frame larger than the room goes in flights a round trip
    apart (what a real round trip costs a 50 KB message on a fresh connection: three flights at 100 ms
    one way), and a frame that follows others on a busy connection waits for the room they hold.

    A window not used decays by Linux's two rules: a send after more than an RTO without any halves it
    for each RTO of the gap (tcp_cwnd_restart); a send while the window has gone unused for an RTO
    or more halves it once, towards the initial window (congestion window validation, RFC 2861,
    tcp_cwnd_application_limited), so small frames (IDONTWANT, IHAVE) slow the decay between large
    messages but do not stop it. "Used", and grown: at least half the window in flight (Linux counts
    a window in slow start as used when half of it is). Not modelled: loss recovery, the receiver's
    window, HyStart."""
    __slots__ = ("cwnd", "last_sent", "last_used", "in_flight", "unacked")

    def __init__(self) -> None:
        self.cwnd = IW_SEGMENTS * MSS
        self.last_sent = float("-inf")
        self.last_used = float("-inf")
        self.in_flight = 0     # payload bytes sent and not yet acknowledged
        self.unacked: deque[tuple[float, int, bool]] = deque()  # (acknowledged at, bytes, grows the window)

    def settle(self, now: float) -> None:
        """The acknowledgements due by `now`: their bytes leave the flight, and grow the window where
        it was in use when they were sent."""
        while self.unacked and self.unacked[0][0] <= now:
            _, size, grows = self.unacked.popleft()
            self.in_flight -= size
            if grows:
                self.cwnd += size

    def room(self, now: float) -> int:
        """Payload bytes the window lets go now."""
        self.settle(now)
        return max(0, self.cwnd - self.in_flight)

    def next_ack(self) -> float:
        """When the first acknowledgement still awaited comes back."""
        return self.unacked[0][0]

    def open(self, now: float, rto: float) -> None:
        """A frame is about to go: apply the decay of the time since the last one."""
        self.settle(now)
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

    def flight_sent(self, payload_bytes: int, now: float, acked_at: float) -> None:
        """A flight of `payload_bytes` has left; its acknowledgements come back at `acked_at`."""
        self.in_flight += payload_bytes
        grows = 2 * self.in_flight >= self.cwnd
        self.unacked.append((acked_at, payload_bytes, grows))
        if grows:
            self.last_used = now
        self.last_sent = now
