"""FastDelivery (SmartPubSub paper, section II-C): publisher-centred content-based pub/sub over Kademlia.

- A publisher creates multicast groups (`create_topic(group predicate)`; the planner gives each
  publisher the hulls of what it publishes, `predicates.group_predicates`) and advertises each one
  on the board at the rendezvous of every attribute of the group's predicate (the node closest to
  hash("fastdelivery/attr/" + name), reached by DhtCore.next_hop). It re-advertises every
  `search_refresh` s; board entries expire after three periods.
- A subscriber searches the board of its filter's attribute closest to it (every group that can
  match the filter has that attribute, see `Predicate.overlaps`), every `search_refresh` s. For each
  group the board returns that overlaps its filter, it sends the publisher a premium subscription
  with its region and capacity (`region`, `capacity` params). The publisher acknowledges it, and the
  subscriber logs `subscribed` with the subscription latency. Premium subscriptions not yet
  acknowledged are re-sent at the next search.
- The publisher keeps each group's members by region. When more than `region_limit` members of a
  region are served directly, the most capable one (largest capacity) is recruited as a helper and
  takes over up to `capacity` of the others. A later member of a region goes to a helper of its
  region with room, if there is one. The publisher logs `helper` (reason `recruited`).
- Publish: the publisher matches the event against the members of every group covering it, with
  an interval-tree index (`node/protocols/content/match_index.py`). Matching members are sent the event directly, or
  through their helper, which delivers it to itself if wanted, forwards it to its matching members,
  and tells the publisher (`Relayed`). So an event travels at most two hops, and it reaches a
  subscriber once: each member gets one way, even when it belongs to two covering groups (the
  helper is told whom to skip).
- Helper failure (it cannot be dialled, or its connection drops): its members return to the
  publisher, which sends them the events the helper had not reported relayed, releases the helper,
  and recruits again (`helper`, reason `failed`). A member that cannot be reached leaves its group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from node.protocols.base import Unsupported
from node.protocols.content.match_index import MatchIndex
from node.protocols.content.predicates import Predicate, PredicateError
from node.protocols.dht.core import DhtCore, event_id, parse_for_app
from node.protocols.dht.kademlia import DhtParams
from node.protocols.fastdelivery.boards import Boards
from node.protocols.fastdelivery.fastdelivery_pb2 import (
    Advert,
    Delegate,
    Event,
    Groups,
    Member,
    Message,
    Premium,
    PremiumAck,
    Relayed,
    Search,
)


class FastDeliveryParams(DhtParams):
    region: str = Field("any", description="where this node is; a helper serves members of its own region")
    capacity: int = Field(5, ge=0, description="members this node can serve as a helper (0: never a helper)")
    region_limit: int = Field(5, ge=1, description="members of one region the publisher serves directly "
                                                   "before it recruits a helper")
    search_refresh: float = Field(5.0, gt=0, description="subscribers search the boards, and publishers "
                                                         "re-advertise, this often (s)")


@dataclass
class Joined:
    """A premium member of one of our groups."""
    filters: list[Predicate]
    region: str
    capacity: int
    helper: str = ""  # the helper serving it; "" = the publisher itself


@dataclass
class Group:
    """A multicast group this node publishes to."""
    pred: Predicate
    members: dict[str, Joined] = field(default_factory=dict)
    index: MatchIndex = field(default_factory=MatchIndex)
    helpers: dict[str, set[str]] = field(default_factory=dict)  # helper -> members it serves
    # helper -> event id -> (event, members it was to forward it to), until it reports it relayed
    unrelayed: dict[str, dict[str, tuple[Event, set[str]]]] = field(default_factory=dict)


@dataclass
class Mine:
    """One of our own filters and the groups it joined."""
    pred: Predicate
    attr: str
    started: float
    asked: set[tuple[str, str]] = field(default_factory=set)   # (publisher, group) premium-subscribed
    joined: set[tuple[str, str]] = field(default_factory=set)  # ... and acknowledged
    acked: bool = False


class FastDelivery(Boards, DhtCore):
    name = "fastdelivery"
    Params = FastDeliveryParams
    AppMessage = Message
    matching = "predicate"
    topic_authors = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.groups: dict[str, Group] = {}
        self.mine: dict[str, Mine] = {}
        self.board: dict[str, dict[tuple[str, str], float]] = {}  # attr -> (publisher, group) -> expiry
        self.helping: dict[tuple[str, str], MatchIndex] = {}      # (publisher, group) -> members we serve
        self.seen: set[str] = set()
        self.dead: set[str] = set()
        self.seq = int(self.clock() * 1e6)

    def on_start(self) -> None:
        super().on_start()
        self.io.set_timer(self.params.search_refresh, "fd.refresh")

    # publisher ---------------------------------------------------------------------------------
    def create_topic(self, topic: str) -> str:
        """Create a multicast group whose predicate is `topic`, and advertise it."""
        pred = parse_for_app(topic)
        gid = str(pred)
        if gid not in self.groups:
            self.groups[gid] = Group(pred)
            self.io.trace("topic_created", topic=gid, msg_id=f"{self.node_id}/{gid}")
            self.dht.when_bootstrapped(lambda: self._advertise(gid))
        return gid

    def _advertise(self, gid: str) -> None:
        for attr in self.groups[gid].pred.names():
            self._route(Message(advert=Advert(group=gid, publisher=self.node_id, attr=attr)), attr, None)

    def publish(self, topic: str, data: bytes) -> str:
        pred = parse_for_app(topic)
        groups = [g for g in self.groups.values() if g.pred.covers(pred)]
        if not groups:
            raise Unsupported(f"fastdelivery: {self.node_id} has no multicast group covering {str(pred)!r}; "
                              "a publisher creates groups with create_topic (the planner gives every "
                              "publisher groups covering the events it publishes)")
        self.seq += 1
        ev = Event(predicate=str(pred), publisher=self.node_id, seq=self.seq, payload=data,
                   birth_ns=int(self.clock() * 1e9))
        eid = event_id(ev)
        self.io.trace("publish_message", topic=ev.predicate, msg_id=eid, size=len(data), seq=self.seq)
        self._multicast(ev, pred, groups)
        return eid

    def _multicast(self, ev: Event, pred: Predicate, groups: list[Group]) -> None:
        """Send `ev` once to every matching member of `groups`, directly or through its helper. A member
        of two groups that both cover the event is reached by one way only (the others skip it)."""
        via: dict[str, str] = {}             # member -> the node we send its copy to (itself or a helper)
        relay: dict[str, list[Group]] = {}   # helper -> groups it relays for
        for g in groups:
            for m in sorted(g.index.query(pred)):
                helper = g.members[m].helper
                if helper and g not in relay.setdefault(helper, []):
                    relay[helper].append(g)
                via.setdefault(m, helper or m)
        eid = event_id(ev)
        for dest in sorted(set(via.values()) | set(relay)):
            out = Event()
            out.CopyFrom(ev)
            for g in relay.get(dest, []):
                targets = {m for m in g.helpers.get(dest, ()) if via.get(m) == dest}
                out.skip.extend(sorted(m for m in g.helpers.get(dest, ()) if via.get(m, dest) != dest))
                out.relay.append(str(g.pred))
                g.unrelayed.setdefault(dest, {})[eid] = (ev, targets)
            if via.get(dest, dest) != dest:
                out.skip.append(dest)  # a helper whose own copy comes another way
            self.send_msg(dest, Message(event=out), data=len(ev.payload))

    def _on_premium(self, peer: str, msg: Premium) -> None:
        g = self.groups.get(msg.group)
        if g is None:
            return
        if msg.cancel:
            self._leave(g, peer)
            return
        filters = [Predicate.parse(f) for f in msg.filters]
        old = g.members.get(peer)
        g.members[peer] = Joined(filters, msg.region or "any", msg.capacity, old.helper if old else "")
        g.index.add(peer, filters)
        if old and old.helper:  # its helper needs the new filters too
            self._delegate(g, old.helper, [peer])
        elif not old:
            self._place(g, peer)
        self.send_msg(peer, Message(premium_ack=PremiumAck(group=msg.group)))

    def _place(self, g: Group, peer: str) -> None:
        """A new member: to a helper of its region with room, else served directly (recruiting a helper
        when the region then has too many served directly)."""
        region = g.members[peer].region
        for h, served in sorted(g.helpers.items()):
            if g.members[h].region == region and len(served) < g.members[h].capacity and h != peer:
                self._delegate(g, h, [peer])
                return
        self._recruit(g, region)

    def _direct(self, g: Group, region: str) -> list[str]:
        return [m for m, j in sorted(g.members.items())
                if j.region == region and not j.helper and m not in g.helpers and m not in self.dead]

    def _recruit(self, g: Group, region: str) -> None:
        while len(direct := self._direct(g, region)) > self.params.region_limit:
            able = [m for m in direct if g.members[m].capacity > 0]
            if not able:
                return
            helper = max(able, key=lambda m: (g.members[m].capacity, m))
            g.helpers[helper] = set()
            others = [m for m in direct if m != helper][:g.members[helper].capacity]
            self._delegate(g, helper, others)
            self.io.trace("helper", peer=helper, topic=str(g.pred), subs=len(others), reason="recruited")

    def _delegate(self, g: Group, helper: str, members: list[str]) -> None:
        for m in members:
            g.members[m].helper = helper
            g.helpers[helper].add(m)
        self.send_msg(helper, Message(delegate=Delegate(group=str(g.pred), members=[
            Member(node=m, filters=[str(f) for f in g.members[m].filters]) for m in members])))

    def _leave(self, g: Group, member: str) -> None:
        j = g.members.pop(member, None)
        if j is None:
            return
        g.index.remove(member)
        if j.helper in g.helpers:
            g.helpers[j.helper].discard(member)
        if member in g.helpers:
            self._helper_lost(g, member)

    def _helper_lost(self, g: Group, helper: str) -> None:
        """Its members come back to us with the events it did not report relayed; recruit again."""
        served = g.helpers.pop(helper, set())
        for m in served:
            if m in g.members:
                g.members[m].helper = ""
        for ev, targets in g.unrelayed.pop(helper, {}).values():
            for m in sorted(targets & set(g.members)):
                self.send_msg(m, Message(event=ev), data=len(ev.payload))
        self.io.trace("helper", peer=helper, topic=str(g.pred), subs=len(served), reason="failed")
        if helper not in self.dead:  # alive but cut off: it must stop forwarding
            self.send_msg(helper, Message(delegate=Delegate(group=str(g.pred), release=True)))
        if helper in g.members:
            self._recruit(g, g.members[helper].region)
        for region in sorted({g.members[m].region for m in served if m in g.members}):
            self._recruit(g, region)

    # subscriber --------------------------------------------------------------------------------
    def subscribe(self, topic: str) -> None:
        sub = self.new_filter(topic, lambda pred, attr: Mine(pred, attr, self.clock()))
        if sub is not None:
            self.dht.when_bootstrapped(lambda: self._search(sub))

    def unsubscribe(self, topic: str) -> None:
        sub = self.mine.pop(str(parse_for_app(topic)), None)
        if sub is None:
            return
        self.io.trace("leave", topic=str(sub.pred))
        for publisher, gid in sorted(sub.asked):
            self._premium(publisher, gid)  # our remaining filters for that group, or a cancel

    def _search(self, sub: Mine) -> None:
        if self.mine.get(str(sub.pred)) is sub:
            self._route(Message(search=Search(filter=str(sub.pred), subscriber=self.node_id, attr=sub.attr)),
                        sub.attr, None)

    def _on_groups(self, adverts: Groups) -> None:
        for adv in adverts.groups:
            g = (adv.publisher, adv.group)
            if adv.publisher == self.node_id:
                continue
            wanted = [s for s in self.mine.values() if s.pred.overlaps(Predicate.parse(adv.group))]
            if any(g not in s.joined for s in wanted):  # new, or not acknowledged yet: (re-)send
                for s in wanted:
                    s.asked.add(g)
                self._premium(*g)

    def _premium(self, publisher: str, gid: str) -> None:
        """Tell the publisher which of our filters want group `gid` (none: cancel)."""
        filters = [str(s.pred) for s in self.mine.values() if (publisher, gid) in s.asked]
        self.send_msg(publisher, Message(premium=Premium(group=gid, filters=filters, region=self.params.region,
                                                         capacity=self.params.capacity, cancel=not filters)))

    def _on_premium_ack(self, peer: str, ack: PremiumAck) -> None:
        for s in self.mine.values():
            if (peer, ack.group) in s.asked:
                s.joined.add((peer, ack.group))
                if not s.acked:
                    s.acked = True
                    self.io.trace("subscribed", topic=str(s.pred),
                                  delay_ms=round((self.clock() - s.started) * 1000, 3))

    def _on_event(self, peer: str, ev: Event) -> None:
        eid = event_id(ev)
        pred = Predicate.parse(ev.predicate)
        if self.node_id in ev.skip:
            pass  # relaying only: our own copy comes another way
        elif eid in self.seen:
            self.io.trace("duplicate_message", topic=ev.predicate, msg_id=eid, peer=peer, size=len(ev.payload))
        elif any(s.pred.matches(pred) for s in self.mine.values()):
            self.seen.add(eid)
            self.io.trace("deliver_message", topic=ev.predicate, msg_id=eid, origin=ev.publisher, peer=peer,
                          size=len(ev.payload))
            self.io.deliver(ev.predicate, eid, ev.payload, ev.publisher)
        if not ev.relay:
            return
        forward = Event()
        forward.CopyFrom(ev)
        del forward.relay[:], forward.skip[:]
        targets: set[str] = set()
        for gid in ev.relay:
            served = self.helping.get((ev.publisher, gid))
            targets |= served.query(pred) if served else set()
        for m in sorted(targets - set(ev.skip) - {self.node_id}):
            self.send_msg(m, Message(event=forward), data=len(ev.payload))
        self.send_msg(peer, Message(relayed=Relayed(event_id=eid, groups=ev.relay)))

    # helper --------------------------------------------------------------------------------------
    def _on_delegate(self, peer: str, msg: Delegate) -> None:
        key = (peer, msg.group)
        if msg.release:
            self.helping.pop(key, None)
            return
        served = self.helping.setdefault(key, MatchIndex())
        for m in msg.members:
            served.add(m.node, [Predicate.parse(f) for f in m.filters])

    def _on_relayed(self, peer: str, msg: Relayed) -> None:
        for gid in msg.groups:
            g = self.groups.get(gid)
            if g is not None:
                g.unrelayed.get(peer, {}).pop(msg.event_id, None)

    # failures ----------------------------------------------------------------------------------
    def on_app_unreachable(self, peer: str) -> None:
        self.dead.add(peer)
        for g in self.groups.values():
            self._leave(g, peer)

    def on_peer_down(self, peer: str) -> None:
        super().on_peer_down(peer)
        for g in self.groups.values():
            if peer in g.helpers:
                self._helper_lost(g, peer)

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        self.dead.discard(peer)
        super().on_peer_up(peer, outbound)

    # wire ----------------------------------------------------------------------------------------
    def on_message(self, peer: str, msg: Message, body: str | None) -> None:
        self.dead.discard(peer)
        try:
            if body == "advert":
                self._route(msg, msg.advert.attr, peer)
            elif body == "search":
                self._route(msg, msg.search.attr, peer)
            elif body == "groups":
                self._on_groups(msg.groups)
            elif body == "premium":
                self._on_premium(peer, msg.premium)
            elif body == "premium_ack":
                self._on_premium_ack(peer, msg.premium_ack)
            elif body == "delegate":
                self._on_delegate(peer, msg.delegate)
            elif body == "event":
                self._on_event(peer, msg.event)
            elif body == "relayed":
                self._on_relayed(peer, msg.relayed)
        except PredicateError:
            self.io.trace("drop_rpc", peer=peer, bytes=msg.ByteSize(), reason="bad predicate")

    def on_app_timer(self, name: str, data: Any) -> None:
        if name == "fd.refresh":
            if self.dht.lookups_done:  # bootstrapped
                for gid in sorted(self.groups):
                    self._advertise(gid)
                for sub in list(self.mine.values()):
                    self._search(sub)
            self.io.set_timer(self.params.search_refresh, "fd.refresh")

    def status(self) -> dict[str, Any]:
        return {**super().status(), "groups": {gid: {"members": len(g.members), "helpers": sorted(g.helpers)}
                                               for gid, g in self.groups.items()},
                "subscriptions": sorted(self.mine), "helping": len(self.helping)}
