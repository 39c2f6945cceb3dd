"""ScoutSubs (SmartPubSub paper, section II-B):
content-based pub/sub over Kademlia, after Hermes.

- The app's "topic" is a predicate (node/protocols/content/predicates.py): subscriptions are filters with
  ranges, events carry point ranges, e.g. `surf T/bali T/price R 1200 1200`.
- Rendezvous of an attribute = the node closest to hash("scoutsubs/attr/" + name). A subscriber sends
  ONE subscription, toward the rendezvous of its attribute whose key is closest to its own id. Routes
  use DhtCore.next_hop: strictly closer at every hop, a lookup when the table knows no closer node.
- Each hop stores the filter under route = the sender (covered filters are not stored twice; safe
  merges are made), copies it to its `fault_tolerance` backups (its nearest peers), and forwards it
  upward unless a filter it already sent up for that attribute covers it.
- Publish: the event goes up to the rendezvous of each of its attributes; from there it follows the
  matching routes down. Every node delivers when one of its own filters matches and forwards once
  per event; a copy arriving by a second rendezvous is a duplicate (logged, not delivered again).
- Failures: a route that cannot be reached gets the event through its backups, which follow the
  failed node's copied table; going up, a failed hop is routed around (the next closest takes over).
- Reliable variant (`reliable: true`): each node acknowledges an event upstream once all the routes it
  sent it on have acknowledged (an ack chain, carried up the publisher's path too); routes still
  missing an ack are re-sent every `check_delivery` s (their backups if they are dead); the
  publisher re-sends every `op_resend` s to each rendezvous not yet acknowledged, and a subscriber
  re-sends its subscription until the rendezvous acknowledges it (the `subscribed` event, with the
  subscription latency).
- Refresh: subscriptions are re-sent every `sub_refresh`; filter tables are swapped for fresh ones
  every second refresh, which garbage-collects subscriptions no longer renewed.
- Redirect variant (`redirect: true`): a node with a single route and no filters of its own is a
  pure relay; it offers upstream a shortcut to jump over it (its route, or that route's own
  shortcut), carried in the subscriptions it sends up. Upstream sends that route's events straight
  to the shortcut. A node that becomes a branch point (a second route, or a filter of its own)
  re-announces, which withdraws the shortcut; a shortcut that cannot be dialled falls back to the route.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from node.protocols.content.predicates import Predicate, PredicateError
from node.protocols.dht.core import DhtCore, event_id, parse_for_app
from node.protocols.dht.kademlia import DhtParams
from node.protocols.dht.table import node_key
from node.protocols.scoutsubs.filters import FilterRouting
from node.protocols.scoutsubs.scoutsubs_pb2 import Ack, Event, Message


class ScoutSubsParams(DhtParams):
    reliable: bool = Field(True, description="ack chains and re-sends (the paper's reliable variants)")
    fault_tolerance: int = Field(2, ge=0, le=8, description="backups holding a copy of each filter table (f)")
    op_resend: float = Field(10.0, gt=0, description="publisher and subscriber re-send period until acknowledged (s)")
    check_delivery: float = Field(30.0, gt=0, description="period of re-sends to routes missing an ack (s)")
    sub_refresh: float = Field(900.0, gt=0, description="subscriptions are re-sent this often; tables swap every 2x")
    redirect: bool = Field(False, description="shortcuts over relays that serve a single route (the paper's "
                                              "redirect variants)")
    handoff_check: float = Field(2.0, gt=0, description="a node acting as rendezvous checks this often whether "
                                                        "its table now knows a closer node, and hands its "
                                                        "filters over to it")


@dataclass
class Mine:
    predicate: Predicate
    sub_id: int
    attr: str
    started: float
    acked: bool = False


@dataclass
class Dispatch:
    """One event handled here (or for a failed node, `on_behalf`): routes still owing an ack."""
    event: Event
    on_behalf: str
    waiting: set[str] = field(default_factory=set)
    upstream: set[str] = field(default_factory=set)
    via: dict[str, str] = field(default_factory=dict)  # redirect: shortcut -> the route it stands for
    done: bool = False
    checks: int = 0


class ScoutSubs(FilterRouting, DhtCore):
    name = "scoutsubs"
    Params = ScoutSubsParams
    AppMessage = Message
    matching = "predicate"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.mine: dict[str, Mine] = {}
        self.filters: dict[str, list[Predicate]] = {}
        self.next_filters: dict[str, list[Predicate]] = {}
        self.sent_up: dict[str, list[Predicate]] = {}
        self.next_sent_up: dict[str, list[Predicate]] = {}
        self.backup_of: dict[str, dict[str, list[Predicate]]] = {}
        self.dispatches: dict[tuple[str, str], Dispatch] = {}
        self.up_wait: dict[tuple[str, str], tuple[str, str | None]] = {}  # (event, attr) -> (hop, upstream)
        self.publishing: dict[str, tuple[Event, set[str]]] = {}  # reliable: rendezvous yet to ack
        self.rendezvous_here: dict[str, set[str]] = {}  # our own events' attributes we are rendezvous for
        # events sent to a peer not yet connected: ("down", event, route) or ("up", event, upstream),
        # re-routed if the peer turns out to be unreachable
        self.unsent: dict[str, list[tuple[str, Event, str | None]]] = {}
        self.dead: set[str] = set()
        # filters that stopped here because no closer node to their rendezvous key was known: while
        # the network forms, a closer node may appear later, and they are handed over to it
        self.as_rendezvous: dict[str, list[Predicate]] = {}
        self.up_via: dict[str, str] = {}  # attribute -> the hop our filters for it went up through
        self.shortcuts: dict[str, str] = {}  # redirect: route -> where its events may go directly
        self.offered = ""  # redirect: the shortcut we last offered upstream
        self.seq = int(self.clock() * 1e6)
        self.refreshes = 0

    def on_start(self) -> None:
        super().on_start()
        self.io.set_timer(self.params.sub_refresh, "ss.refresh")
        self.io.set_timer(self.params.handoff_check, "ss.handoff")

    # app ---------------------------------------------------------------------------------------
    def subscribe(self, topic: str) -> None:
        sub = self.new_filter(topic, lambda pred, attr: Mine(pred, self.rng.getrandbits(63), attr, self.clock()))
        if sub is None:
            return
        self._reannounce()  # a subscriber is a branch point: no shortcut over it
        self.dht.when_bootstrapped(lambda: self._send_subscription(sub))

    def unsubscribe(self, topic: str) -> None:
        """Stop renewing: the filter leaves the tables at their next swap (no explicit unsubscribe)."""
        key = str(parse_for_app(topic))
        if self.mine.pop(key, None) is not None:
            self.io.trace("leave", topic=key)
            self._reannounce()

    def publish(self, topic: str, data: bytes) -> str:
        pred = parse_for_app(topic)
        self.seq += 1
        ev = Event(predicate=str(pred), publisher=self.node_id, seq=self.seq, payload=data,
                   birth_ns=int(self.clock() * 1e9))
        eid = event_id(ev)
        self.io.trace("publish_message", topic=ev.predicate, msg_id=eid, size=len(data), seq=self.seq)
        attrs = set(pred.names())
        if self.params.reliable:
            self.publishing[eid] = (ev, set(attrs))
            self.io.set_timer(self.params.op_resend, "ss.publish", eid)
        self.dht.when_bootstrapped(lambda: [self._up(self._with_attr(ev, a), None) for a in sorted(attrs)])
        return eid

    @staticmethod
    def _with_attr(ev: Event, attr: str) -> Event:
        copy = Event()
        copy.CopyFrom(ev)
        copy.attr = attr
        copy.down = False
        copy.on_behalf = ""
        return copy

    # events ------------------------------------------------------------------------------------
    def _up(self, ev: Event, frm: str | None) -> None:
        """Carry the event toward the rendezvous of ev.attr; at the rendezvous, send it down."""
        def go(hop: str | None) -> None:
            if hop is None:
                self._dispatch(ev, frm, "", came_down=False)
                if frm is None:  # the publisher is the rendezvous: done when its dispatch is
                    self._rendezvous_here(event_id(ev), ev.attr)
                if ev.on_behalf in self.backup_of:  # the rendezvous before us failed: its table too
                    self._dispatch(ev, None, ev.on_behalf, came_down=False)
                return
            if self.params.reliable:
                self.up_wait[(event_id(ev), ev.attr)] = (hop, frm)
            if hop not in self.links.up:
                self.unsent.setdefault(hop, []).append(("up", ev, frm))
            self._send(hop, Message(event=ev), data=len(ev.payload))
        self.next_hop(self.rv_key(ev.attr), self.dead | ({frm} if frm else set()), go)

    def _dispatch(self, ev: Event, frm: str | None, on_behalf: str, came_down: bool = True) -> None:
        """Deliver if wanted here and send down every matching route but the one it came down from (a
        hop on the way up - the publisher too - may well be a route to others, and gets it back)."""
        eid = event_id(ev)
        pred = Predicate.parse(ev.predicate)
        key = (eid, on_behalf)
        state = self.dispatches.get(key)
        if state is not None:  # seen: a copy by a second rendezvous or a re-send
            if not on_behalf and frm and self._wants(pred) and ev.publisher != self.node_id:
                self.io.trace("duplicate_message", topic=ev.predicate, msg_id=eid, peer=frm, size=len(ev.payload))
            if self.params.reliable and frm:
                if state.done:
                    self._ack(frm, ev, on_behalf)
                else:
                    state.upstream.add(frm)
            return
        state = self.dispatches[key] = Dispatch(ev, on_behalf)
        if not on_behalf and self._wants(pred) and ev.publisher != self.node_id:
            self.io.trace("deliver_message", topic=ev.predicate, msg_id=eid, origin=ev.publisher,
                          peer=frm or self.node_id, size=len(ev.payload))
            self.io.deliver(ev.predicate, eid, ev.payload, ev.publisher)
        table = self.backup_of.get(on_behalf, {}) if on_behalf else self._table()
        routes = sorted(r for r, fs in table.items()
                        if r not in (frm if came_down else None, self.node_id, on_behalf) and any(f.matches(pred) for f in fs))
        down = Event()
        down.CopyFrom(ev)
        down.down, down.on_behalf = True, ""
        for route in routes:
            self._dispatch_down(state, down, route)
        if self.params.reliable:
            state.waiting = set(routes)
            state.upstream = {frm} if frm else set()
            if routes:
                self.io.set_timer(self.params.check_delivery, "ss.check", key)
            else:
                self._complete(state)

    def _table(self) -> dict[str, list[Predicate]]:
        """The current table and the one being filled for the next swap, together."""
        out = {r: list(fs) for r, fs in self.filters.items()}
        for r, fs in self.next_filters.items():
            for f in fs:
                self._add(out.setdefault(r, []), f)
        return out

    def _wants(self, pred: Predicate) -> bool:
        return any(sub.predicate.matches(pred) for sub in self.mine.values())

    def _down(self, ev: Event, route: str, shortcut: bool = True) -> str:
        """Send an event down `route` (to its shortcut, redirect variant); returns where it went."""
        target = (self.shortcuts.get(route) or route) if shortcut else route
        if target in self.dead and target != route:
            target = route
        if target in self.dead:
            self._to_backups(ev, route)
            return route
        if target not in self.links.up:
            self.unsent.setdefault(target, []).append(("down", ev, route))
        self._send(target, Message(event=ev), data=len(ev.payload))
        return target

    def _dispatch_down(self, state: Dispatch, ev: Event, route: str) -> None:
        """`_down`, remembering which route a shortcut stands for (its ack is credited to the route)."""
        target = self._down(ev, route)
        if target != route:
            state.via[target] = route

    def _to_backups(self, ev: Event, route: str) -> None:
        """`route` failed: its backups (its nearest peers, who hold its table) forward for it."""
        def found(nearest: list[str]) -> None:
            backups = [p for p in nearest if p != route and p not in self.dead][:self.params.fault_tolerance]
            for b in backups:
                proxy = Event()
                proxy.CopyFrom(ev)
                proxy.on_behalf = route
                if b == self.node_id:
                    self._dispatch(proxy, None, route)
                else:
                    self._send(b, Message(event=proxy), data=len(ev.payload))
        self.dht.find_node(node_key(route), lambda near: found(sorted(near + [self.node_id],
                                                                      key=lambda p: node_key(p) ^ node_key(route))))

    def _on_event(self, peer: str, ev: Event) -> None:
        if not ev.down:
            self._up(ev, peer)
        elif ev.on_behalf:
            self._dispatch(ev, peer, ev.on_behalf)
        else:
            self._dispatch(ev, peer, "")

    # acknowledgements (reliable) ---------------------------------------------------------------
    def _ack(self, peer: str, ev: Event, on_behalf: str) -> None:
        self._send(peer, Message(event_ack=Ack(event_id=event_id(ev), attr=ev.attr, on_behalf=on_behalf)))

    def _complete(self, state: Dispatch) -> None:
        state.done = True
        for up in sorted(state.upstream):  # (a set: its order is the process's string hash)
            self._ack(up, state.event, state.on_behalf)
        if not state.on_behalf:
            self._published(event_id(state.event), ())

    def _rendezvous_here(self, eid: str, attr: str) -> None:
        state = self.dispatches.get((eid, ""))
        if state is not None and state.done:
            self._published(eid, (attr,))
        else:
            self.rendezvous_here.setdefault(eid, set()).add(attr)

    def _published(self, eid: str, attrs: tuple[str, ...]) -> None:
        """The publisher's bookkeeping: these rendezvous (and any waiting here) acknowledged."""
        pending = self.publishing.get(eid)
        if pending is None:
            return
        pending[1].difference_update(attrs)
        pending[1].difference_update(self.rendezvous_here.pop(eid, set()))
        if not pending[1]:
            del self.publishing[eid]

    def _on_event_ack(self, peer: str, ack: Ack) -> None:
        relay = self.up_wait.get((ack.event_id, ack.attr))
        if relay is not None and relay[0] == peer and not ack.on_behalf:
            del self.up_wait[(ack.event_id, ack.attr)]
            upstream = relay[1]
            if upstream is None:
                self._published(ack.event_id, (ack.attr,))
            else:
                self._send(upstream, Message(event_ack=ack))
            return
        for (eid, _), state in list(self.dispatches.items()):
            route = ack.on_behalf or state.via.get(peer, peer)
            if eid == ack.event_id and route in state.waiting:
                state.waiting.discard(route)
                if not state.waiting and not state.done:
                    self._complete(state)

    # failures ----------------------------------------------------------------------------------
    def on_app_unreachable(self, peer: str) -> None:
        self.dead.add(peer)
        for route, shortcut in list(self.shortcuts.items()):
            if shortcut == peer:
                self.shortcuts[route] = ""
        for way, ev, other in self.unsent.pop(peer, []):
            if way == "down" and other != peer:  # a shortcut failed: the route itself
                self._down(ev, other, shortcut=False)
            elif way == "down":
                self._to_backups(ev, peer)
            else:  # going up: around the failed hop (the next closest takes over as rendezvous)
                self.up_wait.pop((event_id(ev), ev.attr), None)
                ev.on_behalf = peer
                self._up(ev, other)

    def on_peer_down(self, peer: str) -> None:
        super().on_peer_down(peer)
        self._reroute_up(peer)

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        self.unsent.pop(peer, None)  # before the queued frames are flushed to it
        self.dead.discard(peer)
        super().on_peer_up(peer, outbound)

    # wire --------------------------------------------------------------------------------------
    def _send(self, peer: str, msg: Message, data: int = 0) -> None:
        self.send_msg(peer, msg, data)

    def on_message(self, peer: str, msg: Message, body: str | None) -> None:
        self.dead.discard(peer)
        try:
            if body == "subscribe":
                self._on_subscription(peer, msg.subscribe)
            elif body == "event":
                Predicate.parse(msg.event.predicate)
                self._on_event(peer, msg.event)
            elif body == "event_ack":
                self._on_event_ack(peer, msg.event_ack)
            elif body == "sub_ack":
                self._on_sub_ack(msg.sub_ack)
            elif body == "backup":
                entry = self.backup_of.setdefault(peer, {}).setdefault(msg.backup.route, [])
                self._add(entry, Predicate.parse(msg.backup.predicate))
        except PredicateError:
            self.io.trace("drop_rpc", peer=peer, bytes=msg.ByteSize(), reason="bad predicate")

    def on_app_timer(self, name: str, data: Any) -> None:
        if name == "ss.subscribe":
            sub = self.mine.get(data)
            if sub is not None and not sub.acked:
                self._send_subscription(sub)
        elif name == "ss.publish":
            pending = self.publishing.get(data)
            if pending:
                ev, attrs = pending
                for attr in sorted(attrs):
                    self._up(self._with_attr(ev, attr), None)
                self.io.set_timer(self.params.op_resend, "ss.publish", data)
        elif name == "ss.check":
            state = self.dispatches.get(data)
            if state is not None and state.waiting and state.checks < 10:
                state.checks += 1
                for route in sorted(state.waiting):
                    if route in self.dead:
                        self._to_backups(state.event, route)
                    else:
                        self._dispatch_down(state, state.event, route)
                self.io.set_timer(self.params.check_delivery, "ss.check", data)
        elif name == "ss.handoff":
            self._hand_over()
            self.io.set_timer(self.params.handoff_check, "ss.handoff")
        elif name == "ss.refresh":
            self.refreshes += 1
            if self.refreshes % 2 == 0:
                self.filters, self.next_filters = self.next_filters, {}
                self.sent_up, self.next_sent_up = self.next_sent_up, {}
                self._reannounce()
            for sub in list(self.mine.values()):
                self._send_subscription(sub)
            self.io.set_timer(self.params.sub_refresh, "ss.refresh")

    def status(self) -> dict[str, Any]:
        return {**super().status(), "subscriptions": sorted(self.mine), "routes": len(self._table()),
                "backups_held": len(self.backup_of), "events": len(self.dispatches)}
