"""Each node's uplink in virtual time, for the discrete-event network (virtual_network.py): a frame to a peer
goes out in flights of its connection's congestion window, sharing the node's upload rate with the
node's other connections that have a flight to send; between flights it waits for acknowledgements;
when its last flight has left, the network propagates it and the connection's next frame starts."""
from __future__ import annotations

from typing import TYPE_CHECKING

from node.simulated.access_link import AccessLink, Sending, wire_bytes
from node.simulated.tcp_window import RTO_MIN, TcpWindow

if TYPE_CHECKING:  # the network owns the clock and hands frames over; a type hint only
    from node.simulated.virtual_network import MemNetwork


class Uplinks:
    """The access links of the nodes that have bandwidth, and each direction's congestion window.
    `tcp_windows` False: a frame is one flight, whatever its size (the links alone)."""

    def __init__(self, net: MemNetwork, tcp_windows: bool = True):
        self.net = net
        self.tcp_windows = tcp_windows
        self.access: dict[str, AccessLink] = {}   # node -> its access link
        self._windows: dict[tuple[str, str], tuple[int, TcpWindow]] = {}  # per direction: its congestion window

    def add(self, node: str, up_bps: float, down_bps: float) -> None:
        self.access[node] = AccessLink(up_bps, down_bps)

    def set_rates(self, node: str, up_bps: float, down_bps: float) -> None:
        """The node's link rates from now on (what was sent so far went at the old rates)."""
        access = self.access.get(node)
        if access:
            access.advance(self.net.now)
            access.up_rate, access.down_rate = up_bps / 8, down_bps / 8
            self.reschedule(node, access)

    def drop_queued(self, node: str) -> int:
        """Forget the node's frames not yet sent (it crashed); how many."""
        access = self.access.get(node)
        if not access:
            return 0
        dropped = access.drop_queued()
        self.reschedule(node, access)
        return dropped

    def send(self, src: str, dst: str, payload: bytes, priority: bool, conn: int) -> bool:
        """Put the frame on `src`'s uplink (behind the connection's frames, its priority lane first);
        False if `src` has no bandwidth modelled."""
        access = self.access.get(src)
        if access is None:
            return False
        size = wire_bytes(len(payload))
        if dst in access.sending:   # the connection is busy: the frame waits its turn
            access.enqueue(dst, payload, size, priority)
            return True
        access.advance(self.net.now)    # one more connection shares the wire from now on
        self._start(src, access, dst, payload, size, conn)
        self.reschedule(src, access, sooner_only=True)
        return True

    def _start(self, src: str, access: AccessLink, dst: str, payload: bytes, size: int, conn: int) -> None:
        """The frame becomes its connection's one on the wire: its first flight goes at once."""
        window = None
        if self.tcp_windows:
            window = self._window(src, dst, conn)
            window.open(self.net.now, RTO_MIN + self.net.rtt(src, dst))
        frame = access.sending[dst] = Sending(payload, size, conn, self.net.now, window)
        self._fly(src, access, dst, frame)

    def _fly(self, src: str, access: AccessLink, dst: str, frame: Sending) -> None:
        """The frame's next flight joins the wire, or, where the window has no room for it, waits for
        the first acknowledgement the connection awaits."""
        if frame.next_flight(self.net.now):
            access.active += 1
        else:
            self.net.schedule_at(frame.window.next_ack(), self._acked, src, access, dst, frame)

    def reschedule(self, src: str, access: AccessLink, sooner_only: bool = False) -> None:
        """Schedule the end of the first flight to leave, in place of the one scheduled before.
        `sooner_only` (a flight joined): keep a wake-up scheduled before that end, since one more
        sharer only delays the others; it finds nothing done and schedules again (one event, where
        cancelling and rescheduling for each of a burst of joins costs one per join)."""
        if not access.active:
            if access.wake is not None:
                self.net.cancel(access.wake[0])
                access.wake = None
            return
        end = self.net.now + access.next_end()
        if access.wake is not None:
            if sooner_only and access.wake[1] <= end:
                return
            self.net.cancel(access.wake[0])
        access.wake = (self.net.schedule_at(end, self._sent, src, access), end)

    def _window(self, src: str, dst: str, conn: int) -> TcpWindow:
        """The congestion window of this direction of connection `conn` (a new connection starts cold)."""
        held = self._windows.get((src, dst))
        if held is None or held[0] != conn:
            held = self._windows[(src, dst)] = (conn, TcpWindow())
        return held[1]

    def _sent(self, src: str, access: AccessLink) -> None:
        """A flight's last byte is through the shared wire. The last flight of a frame: the frame
        propagates and its connection's next frame takes its place. Another: the connection waits
        for the flight's acknowledgements, a round trip after the flight began, before the next."""
        access.wake = None
        access.advance(self.net.now)
        done = [(dst, frame) for dst, frame in access.sending.items() if frame.on_wire and frame.flight <= 1e-3]
        for dst, frame in done:  # a thousandth of a byte: float error
            frame.on_wire = False
            access.active -= 1
            if frame.window is not None:
                frame.window.flight_sent(frame.flight_payload, self.net.now, frame.flight_start + self.net.rtt(src, dst))
            if frame.left > 1e-3:  # (a frame without a window is one flight)
                self.net.schedule_at(frame.window.next_ack(), self._acked, src, access, dst, frame)
                continue
            del access.sending[dst]
            self.net.propagate(src, dst, frame.conn, frame.payload, self.net.now - frame.started, frame.size,
                            depart=self.net.now, ordered=frame.window is not None)
            while (queued := access.next_waiting(dst)) is not None:
                conn = self.net.links.get(frozenset((src, dst)))
                if conn is None:   # the connection closed while the frame waited
                    self.net.in_flight -= 1
                    continue
                self._start(src, access, dst, *queued, conn)
                break
        self.reschedule(src, access)

    def _acked(self, src: str, access: AccessLink, dst: str, frame: Sending) -> None:
        """Acknowledgements of the connection's flights are back: the frame's next flight may go."""
        if access.sending.get(dst) is not frame:   # the node crashed meanwhile
            return
        access.advance(self.net.now)
        self._fly(src, access, dst, frame)
        self.reschedule(src, access, sooner_only=True)

