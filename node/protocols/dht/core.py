"""The base of the cores that run on a Kademlia DHT (PulsarCast, ScoutSubs, FastDelivery).

It owns the DHT (`self.dht`), the on-demand connections (`self.links`) and the wire envelope: every
frame is a `kademlia.Envelope` holding either a DHT message or the protocol's own bytes. Planned
neighbours (the scenario's topology) are the DHT's bootstrap seeds; every node's address is known
(`uses_directory`), as a libp2p peerstore would learn it, but a node only talks to the peers the DHT
or its protocol names. A subclass names its protobuf `AppMessage`, implements `on_message(peer, msg,
body)` and `on_app_timer(name, data)`, and sends with `send_msg`.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar

from node.protocols.base import ProtocolCore, Unsupported, parse_or_drop
from node.protocols.content.predicates import Predicate, PredicateError
from node.protocols.dht.dial_queue import TIMER as LINKS_TIMER
from node.protocols.dht.dial_queue import Links
from node.protocols.dht.kademlia import DhtParams, Kademlia
from node.protocols.dht.kademlia_pb2 import Envelope, Message
from node.protocols.dht.table import content_key, node_key

CLOSEST_HERE_TTL = 30.0  # seconds a lookup's "no node is closer to this key than us" is trusted


def parse_for_app(text: str) -> Predicate:
    """A predicate handed in by the application (subscribe, publish): a malformed one is refused as
    Unsupported, with the parser's reason, so the control API answers it as the caller's error."""
    try:
        return Predicate.parse(text)
    except PredicateError as err:
        raise Unsupported(str(err)) from None


def event_id(ev: Any) -> str:
    """The id of a content-based event (ScoutSubs, FastDelivery): its publisher and sequence number."""
    return f"{ev.publisher}/{ev.seq}"


class DhtCore(ProtocolCore):
    Params = DhtParams
    uses_directory = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.links = Links(self.io, self.params.dial_timeout, self._unreachable)
        self.dht = Kademlia(self.node_id, self.params, self.io, self.clock, self.rng, self._send_kad)
        self._closest_here: dict[tuple[int, frozenset[str]], float] = {}

    # wire ----------------------------------------------------------------------------------------
    def _send_kad(self, peer: str, msg: Message) -> None:
        payload = Envelope(kad=msg).SerializeToString()
        self.links.send(peer, payload, {"bytes": len(payload), "data_bytes": 0})

    def send_app(self, peer: str, app: bytes, data_bytes: int = 0, msgs: int = 0) -> None:
        """Send the protocol's own message; `data_bytes` of it are application payload."""
        payload = Envelope(app=app).SerializeToString()
        sizes = {"bytes": len(payload), "data_bytes": data_bytes}
        if msgs:
            sizes["msgs"] = msgs
        self.links.send(peer, payload, sizes)

    def on_frame(self, peer: str, payload: bytes) -> None:
        env = Envelope()
        if not parse_or_drop(self.io, env, payload, peer):
            return
        body = env.WhichOneof("body")
        if body == "kad":
            self.io.trace("recv_rpc", peer=peer, bytes=len(payload), data_bytes=0)
            self.dht.on_message(peer, env.kad)
        elif body == "app":
            self.dht.heard(peer)
            self.on_app(peer, env.app, len(payload))

    # inputs --------------------------------------------------------------------------------------
    def on_start(self) -> None:
        self.dht.start()

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        self.links.on_peer_up(peer)
        self.dht.seed(peer)
        self.dht.link_up(peer)

    def on_peer_down(self, peer: str) -> None:
        self.links.on_peer_down(peer)
        self.dht.link_lost(peer)

    def _unreachable(self, peer: str) -> None:
        self.dht.peer_failed(peer)
        self.on_app_unreachable(peer)

    def on_timer(self, name: str, data: Any) -> None:
        if name.startswith("kad."):
            self.dht.on_timer(name, data)
        elif name == LINKS_TIMER:
            self.links.on_dial_timeout(data)
        else:
            self.on_app_timer(name, data)

    # rendezvous per attribute (content-based cores) -------------------------------------------------
    def rv_key(self, attr: str) -> int:
        """The DHT key whose closest node is this protocol's rendezvous for attribute `attr`."""
        return content_key(f"{self.name}/attr/{attr}")

    def nearest_attr(self, pred: Any) -> str:
        """The attribute of predicate `pred` whose rendezvous key is closest to this node."""
        return min(pred.names(), key=lambda a: self.rv_key(a) ^ self.dht.own)

    def new_filter(self, topic: str, make: Callable[[Predicate, str], Any]) -> Any | None:
        """The application subscribes the filter `topic`: the subscription `make(predicate, nearest
        attribute)`, kept in `self.mine` under the filter's canonical text, with its join event; None
        if that filter is subscribed already."""
        pred = parse_for_app(topic)
        key = str(pred)
        if key in self.mine:
            return None
        sub = self.mine[key] = make(pred, self.nearest_attr(pred))
        self.io.trace("join", topic=key)
        return sub

    # routing toward a key --------------------------------------------------------------------------
    def next_hop(self, key: int, exclude: set[str], then: Callable[[str | None], None]) -> None:
        """The next hop toward `key`: the known peer closest to it, if strictly closer than this node
        (so a route can never loop); with none in the table, the closest an iterative lookup finds.
        None: this node is the closest (among the peers not excluded)."""
        mine = self.dht.own ^ key
        known = [p for p in self.dht.table.closest(key, self.params.k) if p not in exclude]
        closer = [p for p in known if node_key(p) ^ key < mine]
        if closer:
            then(closer[0])
            return
        if self._closest_here.get((key, frozenset(exclude)), 0.0) > self.clock():
            then(None)  # a lookup said so a moment ago (a rendezvous decides this for every event)
            return

        def found(nearest: list[str]) -> None:
            ok = [p for p in nearest if p not in exclude and node_key(p) ^ key < mine]
            if not ok:
                self._closest_here[(key, frozenset(exclude))] = self.clock() + CLOSEST_HERE_TTL
            then(ok[0] if ok else None)
        self.dht.find_node(key, found)

    # the protocol's messages -------------------------------------------------------------------
    def send_msg(self, peer: str, msg: Any, data: int = 0) -> None:
        """Send one of the protocol's `AppMessage`s; `data` bytes of it are application payload."""
        self.send_app(peer, msg.SerializeToString(), data_bytes=data, msgs=1 if msg.HasField("event") else 0)

    def on_app(self, peer: str, app: bytes, frame_bytes: int) -> None:
        msg = self.AppMessage()
        if not parse_or_drop(self.io, msg, app, peer):
            return
        body = msg.WhichOneof("body")
        data = len(msg.event.payload) if body == "event" else 0
        self.io.trace("recv_rpc", peer=peer, bytes=frame_bytes, data_bytes=data, msgs=1 if body == "event" else 0)
        self.on_message(peer, msg, body)

    # for subclasses ------------------------------------------------------------------------------
    AppMessage: ClassVar[type]  # the protocol's protobuf message: a `oneof body`, events in `event`

    def on_message(self, peer: str, msg: Any, body: str | None) -> None:
        pass

    def on_app_timer(self, name: str, data: Any) -> None:
        pass

    def on_app_unreachable(self, peer: str) -> None:
        """A peer could not be reached (dial timed out): the protocol may repair around it."""

    def status(self) -> dict[str, Any]:
        return {**self.dht.status(), "connected": len(self.links.up)}
