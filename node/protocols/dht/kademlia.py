"""Kademlia (Maymounkov & Mazieres 2002), sans-IO: the DHT that PulsarCast and SmartPubSub run on.

- Keys are 256 bits; a node's key is SHA-256 of its node id; distance is XOR.
- Routing table: one k-bucket per distance bit, least recently seen first. A full bucket keeps its
  old contacts while they answer: the newcomer waits in a replacement cache while the oldest is
  pinged, and replaces it only if that ping goes unanswered.
- RPCs: PING, FIND_NODE, FIND_VALUE, STORE, each answered or timed out after `rpc_timeout`. Any
  message from a peer refreshes it in its bucket; a timed-out peer leaves the table. A request whose
  connection went down unanswered is sent once more when a connection to the peer is up again (two
  nodes dialling each other at once keep one of the two connections and lose what was on the other).
- Iterative lookups: `alpha` requests in flight toward the closest not yet asked; a lookup ends when
  the k closest contacts that answered have all been asked (FIND_VALUE: or when one returns the value).
- Values live at the k nodes closest to their key (`put` = lookup + STORE to each); every holder
  re-stores what it holds every `republish_interval`, and values expire after `value_ttl`. A put
  whose lookup found fewer than k nodes (a table still thin at start-up) is made again, after 2 s
  and doubling up to 64 s, until it finds k. A holder that learns of a new node among the k closest
  to a key, and is itself the closest to it among the others it knows, stores the value there too.
- Bootstrap: when the first planned seed peer is up, look up our own key, then refresh every bucket
  farther than our closest neighbour; later, a bucket untouched for `refresh_interval` is refreshed by
  a lookup of a random key in its range.

The host core supplies `send(peer, message)` and routes messages and `kad.*` timers here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from pydantic import Field

from node.protocols.base import Params, ProtocolIO
from node.protocols.dht.kademlia_pb2 import Message
from node.protocols.dht.table import KEY_BITS, RoutingTable, from_bytes, node_key, to_bytes

# the message types as plain ints: protobuf's enum wrapper answers attribute lookups slowly, and
# these are read for every message
T = SimpleNamespace(**dict(Message.Type.items()))


REPUT_FIRST, REPUT_LAST = 2.0, 64.0  # re-puts of a value stored while the table was thin (s)


class DhtParams(Params):
    k: int = Field(20, ge=1, le=64, description="bucket size and replication factor")
    alpha: int = Field(3, ge=1, le=16, description="lookup parallelism")
    rpc_timeout: float = Field(5.0, gt=0, description="seconds before an unanswered RPC counts as failed")
    dial_timeout: float = Field(5.0, gt=0, description="seconds to connect to a peer before giving up")
    refresh_interval: float = Field(600.0, gt=0, description="a bucket not looked into for this long is refreshed")
    republish_interval: float = Field(3600.0, gt=0, description="holders re-store their values this often")
    value_ttl: float = Field(86400.0, gt=0, description="a value not re-stored for this long is dropped")


@dataclass
class Lookup:
    key: int
    want_value: bool
    done: Callable[[Any], None]
    started: float
    candidates: dict[str, int] = field(default_factory=dict)  # peer -> distance
    asked: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    in_flight: int = 0
    rpcs: int = 0
    finished: bool = False
    without_value: list[str] = field(default_factory=list)  # FIND_VALUE: who answered with nodes


@dataclass
class Pending:
    peer: str
    on_reply: Callable[[Message], None] | None
    on_fail: Callable[[], None] | None
    timer: Any
    msg: Message
    lost: bool = False    # its connection went down before the reply came
    resent: bool = False


class Kademlia:
    def __init__(self, node_id: str, params: DhtParams, io: ProtocolIO, clock: Callable[[], float],
                 rng: Any, send: Callable[[str, Message], None]):
        self.node_id = node_id
        self.params = params
        self.io = io
        self.clock = clock
        self.rng = rng
        self._send = send
        self.own = node_key(node_id)
        self.table = RoutingTable(self.own, params.k)
        self.values: dict[int, tuple[bytes, float]] = {}  # key -> (value, stored at)
        self._pending: dict[int, Pending] = {}
        self._next_rpc = 1
        self._pinging: set[str] = set()
        self.bootstrapped = False
        self._touched = [0.0] * KEY_BITS  # when each bucket was last looked into
        self._waiting_bootstrap: list[Callable[[], None]] = []
        self.lookups_done = 0

    # start ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.io.set_timer(self.params.refresh_interval, "kad.refresh")
        self.io.set_timer(self.params.republish_interval, "kad.republish")

    def seed(self, peer: str) -> None:
        """A planned seed peer is connected: add it, and bootstrap once."""
        self.heard(peer)
        if not self.bootstrapped:
            self.bootstrapped = True
            self.find_node(self.own, self._refresh_far_buckets)

    def when_bootstrapped(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the first self-lookup is over (at once if it is)."""
        if self.lookups_done:
            fn()
        else:
            self._waiting_bootstrap.append(fn)

    def _refresh_far_buckets(self, nearest: list[str]) -> None:
        waiting, self._waiting_bootstrap = self._waiting_bootstrap, []
        for fn in waiting:
            fn()
        if nearest:
            first = self.table.index(node_key(nearest[0]))
            for i in range(first + 1, KEY_BITS):
                self._refresh(i)

    def _refresh(self, i: int) -> None:
        self._touched[i] = self.clock()
        self.find_node(self.own ^ (1 << i) ^ self.rng.getrandbits(i), lambda _: None)

    # inputs --------------------------------------------------------------------------------------
    def on_message(self, peer: str, msg: Message) -> None:
        self.heard(peer)
        kind = msg.type
        if kind in (T.PONG, T.NODES, T.VALUE, T.STORED):
            pending = self._pending.pop(msg.rpc_id, None)
            if pending is None or pending.peer != peer:
                return
            self.io.cancel_timer(pending.timer)
            if pending.on_reply:
                pending.on_reply(msg)
            return
        if kind == T.PING:
            self._send(peer, Message(type=T.PONG, rpc_id=msg.rpc_id))
            return
        try:
            key = from_bytes(msg.key)
        except ValueError:
            self.io.trace("drop_rpc", peer=peer, bytes=msg.ByteSize(), reason="bad key")
            return
        if kind == T.STORE:
            self.values[key] = (msg.value, self.clock())
            self._send(peer, Message(type=T.STORED, rpc_id=msg.rpc_id, key=msg.key))
        elif kind == T.FIND_VALUE and self._value(key) is not None:
            self._send(peer, Message(type=T.VALUE, rpc_id=msg.rpc_id, key=msg.key, value=self._value(key)))
        elif kind in (T.FIND_NODE, T.FIND_VALUE):
            near = [p for p in self.table.closest(key, self.params.k + 1) if p != peer][:self.params.k]
            self._send(peer, Message(type=T.NODES, rpc_id=msg.rpc_id, key=msg.key, closer=near))

    def on_timer(self, name: str, data: Any) -> None:
        if name == "kad.rpc":
            pending = self._pending.pop(data, None)
            if pending is not None:
                self.peer_failed(pending.peer)
                if pending.on_fail:
                    pending.on_fail()
        elif name == "kad.refresh":
            self.io.set_timer(self.params.refresh_interval, "kad.refresh")
            now = self.clock()
            for i, bucket in enumerate(self.table.buckets):
                if bucket and now - self._touched[i] >= self.params.refresh_interval:
                    self._refresh(i)
        elif name == "kad.reput":
            key, value, again = data
            self.put(key, value, again=again)
        elif name == "kad.republish":
            self.io.set_timer(self.params.republish_interval, "kad.republish")
            now = self.clock()
            for key, (value, at) in list(self.values.items()):
                if now - at >= self.params.value_ttl:
                    del self.values[key]
                else:
                    self.put(key, value)

    def peer_failed(self, peer: str) -> None:
        """An RPC to `peer` timed out or it could not be reached: it leaves the routing table."""
        self._pinging.discard(peer)
        self.table.remove(peer)
        for rid in [rid for rid, p in self._pending.items() if p.peer == peer]:
            pending = self._pending.pop(rid)
            self.io.cancel_timer(pending.timer)
            if pending.on_fail:
                pending.on_fail()

    def heard(self, peer: str) -> None:
        new = peer not in self.table
        oldest = self.table.seen(peer)
        if oldest is not None and oldest not in self._pinging:
            self._pinging.add(oldest)
            self.request(oldest, Message(type=T.PING), lambda _m, p=oldest: self._alive(p))
        if new and peer in self.table and self.values:
            self._hand_values(peer)

    def _hand_values(self, newcomer: str) -> None:
        """A new contact among the k closest to a key we hold, when no other contact is closer to it
        than we are, gets a copy (Kademlia, section 2.5: values follow the nodes that join)."""
        for key, (value, _) in list(self.values.items()):
            nearest = self.table.closest(key, self.params.k)
            if newcomer not in nearest:
                continue
            others = [p for p in nearest if p != newcomer]
            if not others or self.own ^ key < node_key(others[0]) ^ key:
                self.request(newcomer, Message(type=T.STORE, key=to_bytes(key), value=value))

    def _alive(self, peer: str) -> None:
        self._pinging.discard(peer)

    def _value(self, key: int) -> bytes | None:
        held = self.values.get(key)
        return held[0] if held else None

    # RPCs ----------------------------------------------------------------------------------------
    def request(self, peer: str, msg: Message, on_reply: Callable[[Message], None] | None = None,
                on_fail: Callable[[], None] | None = None) -> None:
        msg.rpc_id = self._next_rpc
        self._next_rpc += 1
        timer = self.io.set_timer(self.params.rpc_timeout, "kad.rpc", msg.rpc_id)
        self._pending[msg.rpc_id] = Pending(peer, on_reply, on_fail, timer, msg)
        self._send(peer, msg)

    def link_lost(self, peer: str) -> None:
        """The connection to `peer` went down: the requests on it, or their replies, may be lost with it."""
        for pending in self._pending.values():
            if pending.peer == peer:
                pending.lost = True

    def link_up(self, peer: str) -> None:
        """A connection to `peer` is up: each request whose connection went down unanswered is sent again
        on it, once. Two nodes that dial each other at once keep one connection of the two, often with a
        lookup's RPC on the other; left alone, that lookup would wait `rpc_timeout` for nothing. The
        request keeps its id and timer: a peer that never comes back still fails at `rpc_timeout`; a
        reply to the first copy, if it did arrive, is taken and the second ignored."""
        for pending in list(self._pending.values()):
            if pending.peer == peer and pending.lost and not pending.resent:
                pending.resent = True
                self._send(peer, pending.msg)

    # lookups -------------------------------------------------------------------------------------
    def find_node(self, key: int, done: Callable[[list[str]], None]) -> None:
        """The k closest live nodes to `key` (ids, closest first) - this node excluded - to `done`."""
        self._lookup(Lookup(key, False, done, self.clock()))

    def get(self, key: int, done: Callable[[bytes | None], None]) -> None:
        """The value stored under `key` (locally if held here, else from the network), or None."""
        local = self._value(key)
        if local is not None:
            done(local)
            return
        self._lookup(Lookup(key, True, done, self.clock()))

    def put(self, key: int, value: bytes, done: Callable[[int], None] | None = None, again: float = REPUT_FIRST
            ) -> None:
        """Store at the k closest nodes (and here, if this node is among them); `done(copies)`.
        While the lookup finds fewer than k nodes (the DHT is still forming around this node, so
        they may not be the k closest the network will have), the value is put again after
        `again` s, doubling, up to REPUT_LAST."""
        def store(nearest: list[str]) -> None:
            if len(nearest) < self.params.k and again <= REPUT_LAST:
                self.io.set_timer(again, "kad.reput", (key, value, again * 2))
            mine = len(nearest) < self.params.k or (node_key(nearest[-1]) ^ key) > (self.own ^ key)
            if mine:
                self.values[key] = (value, self.clock())
            targets = nearest[:self.params.k - 1] if mine else nearest
            if not targets:
                if done:
                    done(int(mine))
                return
            count = {"ok": int(mine), "left": len(targets)}

            def one(ok: bool) -> None:
                count["ok"] += ok
                count["left"] -= 1
                if count["left"] == 0 and done:
                    done(count["ok"])
            for peer in targets:
                self.request(peer, Message(type=T.STORE, key=to_bytes(key), value=value),
                             lambda _m: one(True), lambda: one(False))
        self.find_node(key, store)

    def _lookup(self, lk: Lookup) -> None:
        i = self.table.index(lk.key) if lk.key != self.own else -1
        if i >= 0:
            self._touched[i] = self.clock()
        for p in self.table.closest(lk.key, self.params.k):
            lk.candidates[p] = node_key(p) ^ lk.key
        self._step(lk)

    def _step(self, lk: Lookup) -> None:
        if lk.finished:
            return
        k = self.params.k
        live = sorted((d, p) for p, d in lk.candidates.items() if p not in lk.failed)
        best = [p for _, p in live[:k]]
        todo = [p for p in best if p not in lk.asked]
        if not todo and lk.in_flight == 0:
            self._finish(lk, [p for _, p in live if p in lk.answered][:k])
            return
        for peer in todo[:max(0, self.params.alpha - lk.in_flight)]:
            lk.asked.add(peer)
            lk.in_flight += 1
            lk.rpcs += 1
            kind = T.FIND_VALUE if lk.want_value else T.FIND_NODE
            self.request(peer, Message(type=kind, key=to_bytes(lk.key)),
                         lambda m, p=peer: self._answer(lk, p, m), lambda p=peer: self._no_answer(lk, p))

    def _answer(self, lk: Lookup, peer: str, msg: Message) -> None:
        lk.in_flight -= 1
        if lk.finished:
            return
        lk.answered.add(peer)
        if msg.type == T.VALUE:
            if lk.without_value:  # cache it at the closest node that did not have it
                nearest = min(lk.without_value, key=lambda p: lk.candidates[p])
                self.request(nearest, Message(type=T.STORE, key=to_bytes(lk.key), value=msg.value))
            self._finish(lk, msg.value)
            return
        if lk.want_value:
            lk.without_value.append(peer)
        for p in msg.closer:
            if p != self.node_id and p not in lk.candidates:
                lk.candidates[p] = node_key(p) ^ lk.key
        self._step(lk)

    def _no_answer(self, lk: Lookup, peer: str) -> None:
        lk.in_flight -= 1
        lk.failed.add(peer)
        self._step(lk)

    def _finish(self, lk: Lookup, result: Any) -> None:
        lk.finished = True
        self.lookups_done += 1
        if lk.want_value and not isinstance(result, bytes):
            result = None  # the lookup ended with the closest nodes, none holding the value
        found = (1 if result is not None else 0) if lk.want_value else len(result)
        self.io.trace("dht_lookup", key=to_bytes(lk.key).hex()[:16], msgs=lk.rpcs, found=found,
                      delay_ms=round((self.clock() - lk.started) * 1000, 3), reason="value" if lk.want_value else "node")
        lk.done(result)

    def status(self) -> dict[str, Any]:
        return {"dht_peers": len(self.table), "dht_values": len(self.values), "dht_lookups": self.lookups_done}
