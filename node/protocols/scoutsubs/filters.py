"""ScoutSubs filter routing: subscriptions sent up toward their attribute rendezvous, re-routed when the
hop they went up through is lost, acknowledged, kept in two table periods, backed up and handed over,
and the redirect variant shortcut offers. A part of the ScoutSubs core (node/protocols/scoutsubs/core.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from node.protocols.content.predicates import Predicate, PredicateError
from node.protocols.dht.table import node_key
from node.protocols.scoutsubs.scoutsubs_pb2 import Ack, BackupFilter, Message, Subscription

if TYPE_CHECKING:
    from node.protocols.scoutsubs.core import Mine


class FilterRouting:
    """Filters and their routes; mixed into ScoutSubs, whose state and helpers it uses."""

    # subscriptions -----------------------------------------------------------------------------
    def _send_subscription(self, sub: Mine) -> None:
        if self.mine.get(str(sub.predicate)) is not sub:
            return
        msg = Subscription(predicate=str(sub.predicate), subscriber=self.node_id, attr=sub.attr, sub_id=sub.sub_id)
        self._route_subscription(msg, None)
        if self.params.reliable and not sub.acked:
            self.io.set_timer(self.params.op_resend, "ss.subscribe", str(sub.predicate))

    def _route_subscription(self, sub: Subscription, frm: str | None, avoid: str = "") -> None:
        pred = Predicate.parse(sub.predicate)
        # covered by what went up in this table period: upstream already sends us whatever it matches
        # (not the previous period's: upstream's next table must hear of us before its swap)
        if frm is not None and any(f.covers(pred) for f in self.next_sent_up.get(sub.attr, [])):
            self._ack_subscription(sub)
            return

        def go(hop: str | None) -> None:
            if hop is None:  # this node is the rendezvous
                self._add(self.as_rendezvous.setdefault(sub.attr, []), pred)
                self._ack_subscription(sub)
                return
            for table in (self.sent_up, self.next_sent_up):
                self._add(table.setdefault(sub.attr, []), pred)
            self.up_via[sub.attr] = hop
            sub.shortcut = self._offer()
            self._send(hop, Message(subscribe=sub))
        self.next_hop(self.rv_key(sub.attr), self.dead | ({frm} if frm else set()) | ({avoid} if avoid else set()), go)

    def _reroute_up(self, lost: str) -> None:
        """The hop our filters went up through is gone: send them up again around it."""
        for attr in [a for a, hop in self.up_via.items() if hop == lost]:
            del self.up_via[attr]
            preds = self.sent_up.pop(attr, [])
            self.next_sent_up.pop(attr, None)
            for pred in preds:
                self._route_subscription(Subscription(predicate=str(pred), subscriber=self.node_id, attr=attr,
                                                      sub_id=0), None, avoid=lost)

    def _offer(self) -> str:
        """Redirect: the shortcut we offer upstream - our single route (or its own shortcut) when we
        only relay for it; "" (send to us) when we are a branch point or a subscriber."""
        if not self.params.redirect or self.mine:
            return ""
        routes = [r for r, fs in self._table().items() if fs]
        if len(routes) != 1:
            return ""
        return self.shortcuts.get(routes[0]) or routes[0]

    def _reannounce(self) -> None:
        """Our offer changed: tell every hop our filters went up through."""
        offer = self._offer()
        if offer == self.offered:
            return
        self.offered = offer
        for attr, hop in sorted(self.up_via.items()):
            preds = self.sent_up.get(attr)
            if preds:
                self._send(hop, Message(subscribe=Subscription(predicate=str(preds[0]), subscriber=self.node_id,
                                                               attr=attr, sub_id=0, shortcut=offer)))

    def _ack_subscription(self, sub: Subscription) -> None:
        if not self.params.reliable:
            return
        ack = Ack(sub_id=sub.sub_id, attr=sub.attr)
        if sub.subscriber == self.node_id:
            self._on_sub_ack(ack)
        else:
            self._send(sub.subscriber, Message(sub_ack=ack))

    def _on_sub_ack(self, ack: Ack) -> None:
        for sub in self.mine.values():
            if sub.sub_id == ack.sub_id and not sub.acked:
                sub.acked = True
                self.io.trace("subscribed", topic=str(sub.predicate),
                              delay_ms=round((self.clock() - sub.started) * 1000, 3))

    def _on_subscription(self, peer: str, sub: Subscription) -> None:
        try:
            pred = Predicate.parse(sub.predicate)
        except PredicateError:
            self.io.trace("drop_rpc", peer=peer, bytes=sub.ByteSize(), reason="bad predicate")
            return
        for table in (self.filters, self.next_filters):
            self._add(table.setdefault(peer, []), pred)
        if self.params.redirect:
            self.shortcuts[peer] = sub.shortcut
        for backup in self._backups():
            self._send(backup, Message(backup=BackupFilter(route=peer, predicate=str(pred))))
        self._route_subscription(sub, peer)
        self._reannounce()

    @staticmethod
    def _add(entry: list[Predicate], pred: Predicate) -> None:
        """Add a filter to a route's entry: nothing if covered, merged where safe, else appended."""
        if any(f.covers(pred) for f in entry):
            return
        entry[:] = [f for f in entry if not pred.covers(f)]
        for i, f in enumerate(entry):
            merged = f.merge(pred)
            if merged is not None:
                entry[i] = merged
                return
        entry.append(pred)

    def _backups(self) -> list[str]:
        nearest = [p for p in self.dht.table.closest(self.dht.own, self.params.fault_tolerance + len(self.dead))
                   if p not in self.dead]
        return nearest[:self.params.fault_tolerance]

    def _hand_over(self) -> None:
        """Filters held as rendezvous go up to a closer node the routing table has learnt since."""
        for attr, preds in list(self.as_rendezvous.items()):
            key = self.rv_key(attr)
            closer = [p for p in self.dht.table.closest(key, self.params.k)
                      if p not in self.dead and node_key(p) ^ key < self.dht.own ^ key]
            if not closer:
                continue
            del self.as_rendezvous[attr]
            self.up_via[attr] = closer[0]
            for pred in preds:
                for table in (self.sent_up, self.next_sent_up):
                    self._add(table.setdefault(attr, []), pred)
                self._send(closer[0], Message(subscribe=Subscription(predicate=str(pred), subscriber=self.node_id,
                                                                     attr=attr, sub_id=0, shortcut=self._offer())))
