"""Each node's uplink in virtual time, for the discrete-event network (virtual_network.py): a frame to a peer
goes out in flights of its connection's congestion window, sharing the node's upload rate with the
node's other connections that have a flight to send; between flights it waits for acknowledgements;
when its last flight has left, the network propagates it and the connection's next frame starts."""
from __future__ import annotations

from typing import TYPE_CHECKING

from node.simulated.access_link import AccessLink, Sending, wire_bytes
from node.simulated.tcp_window import RTO_MIN, Flight, TcpWindow

if TYPE_CHECKING:  # the network owns the clock and hands frames over; a type hint only
    from node.simulated.virtual_network import MemNetwork


class Uplinks:
    """The access links of the nodes that have bandwidth, and each direction's congestion window.
    `tcp_windows` False: a frame is one flight, whatever its size, and a loss cuts no window (the links alone)."""

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
            self._advance(node, access)
            access.take(self.net.now, 0.0, 0.0)   # the queue drained at the old rate until now
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
        self._advance(src, access)    # one more connection shares the wire from now on
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
        if not frame.next_flight(self.net.now):
            self._wait(src, access, dst, frame)
            return
        access.active += 1
        if frame.window is not None:
            frame.acks = frame.window.flight_started(frame.flight_payload)
            self.net.schedule(self.net.one_way(src, dst), self._first_byte, src, dst, frame.window, frame.acks)

    def _wait(self, src: str, access: AccessLink, dst: str, frame: Sending) -> None:
        """The frame waits for the connection's first acknowledgement still awaited: a wake-up then,
        or, while its time is not known (its flight has not reached the receiver's downlink yet), when
        the network learns it (`_first_byte`)."""
        when = frame.window.next_ack()
        frame.woken = when is not None
        if frame.woken:
            self.net.schedule_at(when, self._acked, src, access, dst, frame)

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
        for the flight's acknowledgements (`_first_byte`) before the next."""
        access.wake = None
        self._advance(src, access)
        done = [(dst, frame) for dst, frame in access.sending.items() if frame.on_wire and frame.flight <= 1e-3]
        for dst, frame in done:  # a thousandth of a byte: float error
            frame.on_wire = False
            access.active -= 1
            last = frame.left <= 1e-3  # (a frame without a window is one flight)
            if frame.window is not None:
                frame.window.flight_ended(frame.acks, self.net.now)  # type: ignore[arg-type]
                self.net.propagate(src, dst, frame.conn, frame.payload if last else None, frame.tail,
                                   self.net.now - frame.tail_from, ordered=True)
                if not last:
                    self._wait(src, access, dst, frame)
                    continue
            else:
                self.net.propagate(src, dst, frame.conn, frame.payload, frame.tail, self.net.now - frame.tail_from)
            del access.sending[dst]
            while (queued := access.next_waiting(dst)) is not None:
                conn = self.net.links.get(frozenset((src, dst)))
                if conn is None:   # the connection closed while the frame waited
                    self.net.in_flight -= 1
                    continue
                self._start(src, access, dst, *queued, conn)
                break
        self.reschedule(src, access)

    def _advance(self, src: str, access: AccessLink) -> None:
        """Charge the uplink's time since its last change to its flights; what each flight sent
        meanwhile heads for its receiver's downlink as a chunk (a flight's last chunk goes with the
        flight's end, `MemNetwork.propagate`)."""
        access.advance(self.net.now)
        for dst, frame in access.sending.items():
            if frame.on_wire and frame.flight > 1e-3 and frame.tail > 0.0:
                self.net.schedule(self.net.one_way(src, dst), self.net.downlinks.reach, src, dst, frame.conn, None,
                                  frame.tail, self.net.now - frame.tail_from)
                frame.tail, frame.tail_from = 0.0, self.net.now

    def _first_byte(self, src: str, dst: str, window: TcpWindow, flight: Flight) -> None:
        """The flight's first byte reaches `dst`'s downlink: it waits for the queue ahead of it, and its
        acknowledgements are back a one-way delay after it is through (a queue there slows the
        window's clock). A frame of the connection waiting for them wakes then."""
        down = self.access.get(dst)
        wait = down.queue_wait(self.net.now) if down is not None else 0.0
        flight.acked_at = self.net.now + wait + self.net.one_way(dst, src)
        access = self.access.get(src)
        frame = access.sending.get(dst) if access else None
        if frame is not None and frame.window is window and not frame.on_wire and not frame.woken:
            self._wait(src, access, dst, frame)  # type: ignore[arg-type]

    def loss_detected(self, src: str, dst: str, conn: int) -> None:
        """The sender learns that bytes of the connection were lost: its window is cut (once a round trip)."""
        held = self._windows.get((src, dst))
        if held is not None and held[0] == conn:
            held[1].lost(self.net.now, self.net.rtt(src, dst))

    def _acked(self, src: str, access: AccessLink, dst: str, frame: Sending) -> None:
        """Acknowledgements of the connection's flights are back: the frame's next flight may go."""
        frame.woken = False
        if access.sending.get(dst) is not frame:   # the node crashed meanwhile
            return
        self._advance(src, access)
        self._fly(src, access, dst, frame)
        self.reschedule(src, access, sooner_only=True)
