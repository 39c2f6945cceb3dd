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
    """The receiving side of every connection: lost bytes not yet sent again, per direction, and the
    frames waiting behind them."""

    def __init__(self, net: MemNetwork):
        self.net = net
        self._holes: dict[tuple[str, str], int] = {}     # per direction: lost bytes not yet sent again
        self._blocked: dict[tuple[str, str], list[tuple[int, bytes, float]]] = {}  # frames behind them
        self._repaired: dict[tuple[str, str], float] = {}  # when the last retransmission was through

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
        lost too, after its timeout."""
        key = (src, dst)
        if first:
            self._holes[key] = self._holes.get(key, 0) + 1
            self.net.schedule(self.net.one_way(dst, src), self.net.uplinks.loss_detected, src, dst, conn)
        rtt = self.net.rtt(src, dst)
        self.net.schedule(rtt if first else RTO_MIN + rtt, self._retransmitted, src, dst, conn, size)

    def _retransmitted(self, src: str, dst: str, conn: int, size: float) -> None:
        """The lost bytes reach the downlink again; once none of the direction's are missing, the
        frames behind them go on (on a connection closed meanwhile, to be dropped at the hand-over)."""
        key = (src, dst)
        down = self.net.access[dst]
        if self.net.links.get(frozenset(key)) == conn:
            _, through, dropped = down.take(self.net.now, size, 0.0)
            if dropped:
                self._lose(src, dst, conn, dropped, first=False)
                return
            self._repaired[key] = max(self._repaired.get(key, 0.0), self.net.now + through)
        self._holes[key] -= 1
        if self._holes[key]:
            return
        del self._holes[key]
        for conn_, payload, at in self._blocked.pop(key, ()):
            self._in_order(src, dst, conn_, payload, at)

    def _in_order(self, src: str, dst: str, conn: int, payload: bytes, at: float) -> None:
        """Hand the frame over at `at`, or once the bytes lost before it are there again."""
        key = (src, dst)
        if key in self._holes:
            self._blocked.setdefault(key, []).append((conn, payload, at))
            return
        at = max(at, self._repaired.get(key, 0.0))
        if at > self.net.now:
            self.net.schedule(at - self.net.now, self.net.hand_over, src, dst, conn, payload)
            return
        self.net.hand_over(src, dst, conn, payload)
