"""TCP's congestion window in virtual time, one per direction of a connection of the discrete-event
network (uplinks.py), and TCP's minimum retransmission timeout."""
from __future__ import annotations

from collections import deque

from node.simulated.access_link import MSS

RTO_MIN = 0.2         # Linux TCP's minimum retransmission timeout
IW_SEGMENTS = 10      # Linux's initial congestion window (RFC 6928)
CA_GROWTH = 1 / 20    # past the slow-start threshold: a twentieth of the bytes acknowledged (cubic's early growth)
LOSS_BETA = 717 / 1024  # cubic's window after a loss, of the window before


class Flight:
    """A flight sent and not yet acknowledged: its payload bytes, whether it grows the window, and when
    its acknowledgements come back (None until its first byte has reached the receiver's downlink: the
    network sets it, uplinks.py's `_first_byte`)."""
    __slots__ = ("size", "grows", "acked_at")

    def __init__(self, size: int, grows: bool):
        self.size, self.grows = size, grows
        self.acked_at: float | None = None


class TcpWindow:
    """One direction of a connection's congestion window, as Linux's cubic grows it: a cold connection
    starts at IW_SEGMENTS segments and slow start grows the window by each flight acknowledged while
    the window was in use (doubling per round trip). The window counts the bytes in flight, whichever
    frame they belong to: a frame larger than the room goes in flights a round trip apart (what a real
    round trip costs a 50 KB message on a fresh connection: three flights at 100 ms one way), and a
    frame that follows others on a busy connection waits for the room they hold.

    A flight's acknowledgements come back a round trip after it began plus the time its first byte
    waited in the receiver's download queue (the network sets `Flight.acked_at`), so a queue
    on the path slows the window's clock. Bytes a full queue dropped cut the window and the slow-start
    threshold to LOSS_BETA of it, once per round trip of losses (`lost`); past the threshold the window
    grows by a twentieth of what is acknowledged, about 5% a round trip.

    A window not used decays by Linux's two rules: a send after more than an RTO without any halves it
    for each RTO of the gap (tcp_cwnd_restart); a send while the window has gone unused for an RTO
    or more halves it once, towards the initial window (congestion window validation, RFC 2861,
    tcp_cwnd_application_limited), so small frames (IDONTWANT, IHAVE) slow the decay between large
    messages but do not stop it; either keeps the threshold at least three quarters of the window it
    decays from. "Used", and grown: at least half the window in flight (Linux counts a window in slow
    start as used when half of it is). Not modelled: HyStart (cubic's early end of slow start), the
    receiver's window."""
    __slots__ = ("cwnd", "ssthresh", "last_sent", "last_used", "in_flight", "unacked", "recovery_end")

    def __init__(self) -> None:
        self.cwnd = IW_SEGMENTS * MSS
        self.ssthresh = float("inf")
        self.last_sent = float("-inf")
        self.last_used = float("-inf")
        self.in_flight = 0     # payload bytes sent and not yet acknowledged
        self.unacked: deque[Flight] = deque()
        self.recovery_end = float("-inf")

    def settle(self, now: float) -> None:
        """The acknowledgements due by `now`: their bytes leave the flight, and grow the window where
        it was in use when they were sent."""
        unacked = self.unacked
        while unacked and unacked[0].acked_at is not None and unacked[0].acked_at <= now:
            flight = unacked.popleft()
            self.in_flight -= flight.size
            if flight.grows:
                self._grow(flight)

    def _grow(self, flight: Flight) -> None:
        if self.cwnd < self.ssthresh:
            self.cwnd = min(self.cwnd + flight.size, max(self.ssthresh, self.cwnd))  # type: ignore[type-var]
        else:
            self.cwnd += int(flight.size * CA_GROWTH)

    def lost(self, now: float, rtt: float) -> None:
        """Bytes were lost (fast retransmit): the window and threshold drop to LOSS_BETA of the window,
        once per round trip of losses."""
        if now < self.recovery_end:
            return
        self.cwnd = max(2 * MSS, int(self.cwnd * LOSS_BETA))
        self.ssthresh = self.cwnd
        self.recovery_end = now + rtt

    def room(self, now: float) -> int:
        """Payload bytes the window lets go now."""
        self.settle(now)
        return max(0, self.cwnd - self.in_flight)

    def next_ack(self) -> float | None:
        """When the first acknowledgement still awaited comes back (None: not known yet)."""
        return self.unacked[0].acked_at

    def open(self, now: float, rto: float) -> None:
        """A frame is about to go: apply the decay of the time since the last one."""
        self.settle(now)
        restart = IW_SEGMENTS * MSS
        idle = now - self.last_sent
        if idle > rto:
            self.ssthresh = max(self.ssthresh, self.cwnd * 3 // 4)
            while idle > rto and self.cwnd > restart:
                self.cwnd = max(restart, self.cwnd // 2)
                idle -= rto
            self.last_used = now
        elif now - self.last_used >= rto:
            self.ssthresh = max(self.ssthresh, self.cwnd * 3 // 4)
            self.cwnd = max(restart, (self.cwnd + restart) // 2)
            self.last_used = now

    def flight_started(self, payload_bytes: int) -> Flight:
        """A flight of `payload_bytes` begins; its acknowledgements' time is set when the receiver's
        downlink takes its first byte."""
        self.in_flight += payload_bytes
        flight = Flight(payload_bytes, 2 * self.in_flight >= self.cwnd)
        self.unacked.append(flight)
        return flight

    def flight_ended(self, flight: Flight, now: float) -> None:
        """The flight's last byte has left."""
        if flight.grows:
            self.last_used = now
        self.last_sent = now
