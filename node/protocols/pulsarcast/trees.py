"""PulsarCast dissemination trees and history: joining a topic tree toward its rendezvous, JOIN/LEAVE,
parents lost and repaired, the meta topic, and rebuilding a topic history from the DHT. A part of the
PulsarCast core (node/protocols/pulsarcast/core.py)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from node.protocols.dht.table import content_key, node_key
from node.protocols.pulsarcast.pulsarcast_pb2 import EventDescriptor, Message, TopicDescriptor

Op = Message.Op


def descriptor_id(desc: TopicDescriptor | EventDescriptor) -> str:
    return hashlib.sha256(desc.SerializeToString(deterministic=True)).hexdigest()


@dataclass
class Tree:
    """This node's place in one topic's dissemination tree."""
    topic: TopicDescriptor
    parent: str | None = None
    children: set[str] = field(default_factory=set)
    subscribed: bool = False      # the app's (or the meta subscription's) interest
    joined: bool = False          # a JOIN went up (or this is the author)
    retries: int = 0
    last_seen: str = ""           # newest event id seen, for LAST_SEEN linking and history
    tried: set[str] = field(default_factory=set)  # parents that failed during this repair


class Trees:
    """Topic trees and history; mixed into PulsarCast, whose state and helpers it uses."""

    # trees -------------------------------------------------------------------------------------
    def _subscribe_id(self, tid: str, meta: bool) -> None:
        def joined(desc: TopicDescriptor | None) -> None:
            if desc is None:
                return
            tree = self.trees.setdefault(tid, Tree(desc))
            tree.subscribed = True
            self._join(tid)
            if self.params.subscribe_meta and not meta:
                for sub in desc.sub_topics:
                    if sub.name == "meta":
                        self._subscribe_id(sub.id, meta=True)
        self._with_topic(tid, joined)

    def _join(self, tid: str) -> None:
        tree = self.trees[tid]
        if tree.topic.author == self.node_id or tree.parent is not None:
            tree.joined = True
            return

        def go(hop: str | None) -> None:
            if tree.parent is not None or self.trees.get(tid) is not tree:
                return
            if hop is None:  # nobody closer to the author: it is gone or not yet known
                self.io.set_timer(self.params.retry_interval * 2, "pc.rejoin", tid)
                return
            tree.parent = hop
            tree.joined = True
            self.io.trace("graft", peer=hop, topic=tree.topic.name)
            self._send(hop, Message(op=Op.JOIN_TOPIC, topic_id=tid))
        self.next_hop(node_key(tree.topic.author), tree.tried, go)

    def _on_join(self, peer: str, tid: str) -> None:
        def have(desc: TopicDescriptor | None) -> None:
            if desc is None:
                return
            tree = self.trees.setdefault(tid, Tree(desc))
            if peer != tree.parent:
                tree.children.add(peer)
            self._join(tid)
        self._with_topic(tid, have)

    def _on_leave(self, peer: str, tid: str) -> None:
        tree = self.trees.get(tid)
        if tree is None:
            return
        tree.children.discard(peer)
        if peer == tree.parent:
            self._lost_parent(tid, retry=False)
        self._maybe_leave(tid)

    def _maybe_leave(self, tid: str) -> None:
        tree = self.trees[tid]
        if tree.subscribed or tree.children or tree.topic.author == self.node_id or self._meta_needed(tid):
            return
        if tree.parent is not None:
            self.io.trace("prune", peer=tree.parent, topic=tree.topic.name)
            self._send(tree.parent, Message(op=Op.LEAVE_TOPIC, topic_id=tid))
        del self.trees[tid]
        for sub in tree.topic.sub_topics:
            if sub.name == "meta" and sub.id in self.trees and not self.trees[sub.id].children:
                self.trees[sub.id].subscribed = False
                self._maybe_leave(sub.id)

    def _meta_needed(self, tid: str) -> bool:
        """A meta topic stays while its topic is subscribed here."""
        return any(sub.id == tid and t.subscribed for t in self.trees.values() for sub in t.topic.sub_topics)

    def _lost_parent(self, tid: str, retry: bool) -> None:
        tree = self.trees.get(tid)
        if tree is None or tree.parent is None:
            return
        lost, tree.parent = tree.parent, None
        if retry and tree.retries < self.params.join_retries:
            tree.retries += 1
            self.io.set_timer(self.params.retry_interval, "pc.retry", (tid, lost))
        else:
            tree.tried.add(lost)
            tree.retries = 0
            self._join(tid)

    # history -----------------------------------------------------------------------------------
    def _rebuild(self, tid: str, head: str, why: str) -> None:
        """Walk parent links back from `head`: local store first, then the DHT."""
        self.history_runs += 1
        started = self.clock()
        name = self.store_name(tid)
        walk = {"steps": 0, "fetched": 0}

        def step(eid: str) -> None:
            while eid:
                local = self.store.get(eid)
                if not isinstance(local, EventDescriptor):
                    break
                walk["steps"] += 1
                eid = local.parent
            if not eid:
                return finish("complete")
            self.dht.get(content_key(eid), lambda raw: fetched(eid, raw))

        def fetched(eid: str, raw: bytes | None) -> None:
            event = EventDescriptor()
            try:
                if raw is None:
                    raise DecodeError("not in the DHT")
                event.ParseFromString(raw)
            except DecodeError:
                return finish("missing " + eid[:16])
            if descriptor_id(event) != eid:
                return finish("forged " + eid[:16])
            self.store[eid] = event
            walk["fetched"] += 1
            if eid not in self.seen:
                self.seen.add(eid)
                self.io.trace("history_event", topic=name, msg_id=event.request or eid, origin=event.author,
                              size=len(event.payload))
            step(eid)

        def finish(result: str) -> None:
            self.io.trace("history", topic=name, messages=walk["steps"], found=walk["fetched"],
                          reason=f"{why}: {result}", delay_ms=round((self.clock() - started) * 1000, 3))
        step(head)
