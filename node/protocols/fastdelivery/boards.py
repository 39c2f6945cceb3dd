"""FastDelivery rendezvous boards: multicast groups advertised on the board at the rendezvous of each
attribute of their predicate, re-advertised and expired, and searched by subscribers. A part of the
FastDelivery core (node/protocols/fastdelivery/core.py)."""
from __future__ import annotations

from node.protocols.content.predicates import Predicate
from node.protocols.fastdelivery.fastdelivery_pb2 import (
    Advert,
    Groups,
    Message,
    Search,
)

BOARD_PERIODS = 3  # a board keeps an advert for this many re-advertising periods


class Boards:
    """The boards; mixed into FastDelivery, whose state and helpers it uses."""

    # boards ------------------------------------------------------------------------------------
    def _route(self, msg: Message, attr: str, frm: str | None) -> None:
        """Carry an advert or a search to the rendezvous of `attr`; there, post it or answer it."""
        def go(hop: str | None) -> None:
            if hop is not None:
                self.send_msg(hop, msg)
            elif msg.HasField("advert"):
                adv = msg.advert
                expiry = self.clock() + BOARD_PERIODS * self.params.search_refresh
                self.board.setdefault(attr, {})[(adv.publisher, adv.group)] = expiry
            else:
                self._answer(msg.search)
        self.next_hop(self.rv_key(attr), self.dead | ({frm} if frm else set()), go)

    def _answer(self, search: Search) -> None:
        f = Predicate.parse(search.filter)
        now = self.clock()
        board = self.board.get(search.attr, {})
        for g, expiry in list(board.items()):
            if expiry < now:
                del board[g]
        found = Groups(groups=[Advert(publisher=p, group=gid, attr=search.attr) for (p, gid) in sorted(board)
                               if f.overlaps(Predicate.parse(gid))])
        if not found.groups:
            return
        if search.subscriber == self.node_id:
            self._on_groups(found)
        else:
            self.send_msg(search.subscriber, Message(groups=found))
