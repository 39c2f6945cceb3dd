"""What reaches each node's downlink in virtual time, for the discrete-event network (virtual_network.py):
a flight's bytes join the receiver's download queue (access_link.py, `AccessLink.take`); bytes a full
queue drops TCP sends again a round trip later (after its timeout if the retransmission is lost too),
the sender cutting its window as it learns of the loss (uplinks.py); a frame is handed over once its
bytes are through and every byte before it on the connection is there (TCP delivers in order).
May import: tcp_window (RTO_MIN); the network is handed in (a type hint only)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from node.simulated.tcp_window import RTO_MIN

if TYPE_CHECKING:  # the network owns the clock, the links and the hand-over; a type hint only
    from node.simulated.virtual_network import MemNetwork


class Downlinks:
    """The receiving side of every connection: per direction of a connection, the losses whose bytes
    are not there again yet, the frames waiting behind them, and the time before which no frame is
    handed over (the last hand-over, or the last retransmission through)."""

    def __init__(self, net: MemNetwork):
        self.net = net
        self._holes: dict[tuple[str, str, int], int] = {}   # losses not yet repaired
        self._blocked: dict[tuple[str, str, int], list[tuple[bytes, float]]] = {}  # frames behind them
        self._not_before: dict[tuple[str, str], tuple[int, float]] = {}  # (connection, time)

    def reach(self, src: str, dst: str, conn: int, payload: bytes | None, size: float, spread: float) -> None:
        """Bytes of a flight (`size`, over the last `spread` seconds) are at dst's downlink; they go
        through behind what came first, or a full queue drops them and TCP sends them again. `payload`:
        the frame they end, handed over once they are through and every byte before them is there."""
        down = self.net.access.get(dst)
        through = 0.0
        if down is not None and size:
            _, through, dropped = down.take(self.net.now, size, spread)
            if dropped:
                self._lose(src, dst, conn, dropped, first=True)
        if payload is not None:
            self._in_order(src, dst, conn, payload, self.net.now + through)

    def _lose(self, src: str, dst: str, conn: int, size: float, first: bool) -> None:
        """A full downlink dropped `size` bytes of the connection: the frames after them wait. The
        sender learns of it from the selective acknowledgements of what follows, cuts its window and
        sends them again a round trip after the loss (fast retransmit), or, if the retransmission is
        lost too, RTO_MIN and a round trip after that (the timeout's doubling is not modelled)."""
        key = (src, dst, conn)
        if first:
            self._holes[key] = self._holes.get(key, 0) + 1
            self.net.schedule(self.net.one_way(dst, src), self.net.uplinks.loss_detected, src, dst, conn)
        rtt = self.net.rtt(src, dst)
        self.net.schedule(rtt if first else RTO_MIN + rtt, self._retransmitted, src, dst, conn, size)

    def _retransmitted(self, src: str, dst: str, conn: int, size: float) -> None:
        """The lost bytes reach the downlink again; once none of the connection's are missing, the
        frames behind them go on (on a connection closed meanwhile, to be dropped at the hand-over)."""
        key = (src, dst, conn)
        if self.net.links.get(frozenset((src, dst))) == conn:
            _, through, dropped = self.net.access[dst].take(self.net.now, size, 0.0)
            if dropped:
                self._lose(src, dst, conn, dropped, first=False)
                return
            self._hold_until(src, dst, conn, self.net.now + through)
        self._holes[key] -= 1
        if self._holes[key]:
            return
        del self._holes[key]
        for payload, at in self._blocked.pop(key, ()):
            self._in_order(src, dst, conn, payload, at)

    def _hold_until(self, src: str, dst: str, conn: int, when: float) -> float:
        """No frame of the connection is handed over before `when` (nor before one already was);
        the time a frame due at `when` is handed over."""
        held = self._not_before.get((src, dst))
        if held is not None and held[0] == conn and held[1] > when:
            return held[1]
        self._not_before[(src, dst)] = (conn, when)
        return when

    def _in_order(self, src: str, dst: str, conn: int, payload: bytes, at: float) -> None:
        """Hand the frame over at `at`, after the connection's previous one, and once the bytes lost
        before it are there again."""
        if (src, dst, conn) in self._holes:
            self._blocked.setdefault((src, dst, conn), []).append((payload, at))
            return
        at = self._hold_until(src, dst, conn, at)
        if at > self.net.now:
            self.net.schedule(at - self.net.now, self.net.hand_over, src, dst, conn, payload)
            return
        self.net.hand_over(src, dst, conn, payload)
