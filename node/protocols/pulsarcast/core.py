"""PulsarCast (PulsarCast thesis, chapter 3).

Topic-based pub/sub on a Kademlia DHT, one dissemination tree per topic rooted at its author.
- Descriptors (proto/pulsarcast.proto) are immutable and content-addressed (id = SHA-256 of the
  deterministic encoding), linked as a DAG: an event links to its topic and to a parent event; a
  topic to its previous version and to its `meta` sub-topic. Every descriptor is stored in the DHT
  under its id before it is sent on; a topic's name is stored under hash("pulsarcast/name/" + name).
- create_topic (seed Algorithm 1): meta topic, topic, both stored, NEW_TOPIC event in the meta topic.
- JOIN (Algorithm 2): toward the author through the closest known peer; each hop records the sender
  as a child and the next hop as its parent, and stops at the author or at a node already in the
  tree. Unlike the authors' code, a hop only forwards to a peer strictly XOR-closer to the author
  (a real lookup if none is known): distance falls along every parent edge, so trees have no cycles.
- Publish (Algorithms 3, 4): an allowed publisher links the event (LAST_SEEN: parent = the last event
  it saw in the topic; CUSTOM: the caller's parent), stores it, delivers it locally and sends it to
  every tree neighbour; receivers de-duplicate by id and pass it on to all neighbours but the sender.
  A node not allowed to publish sends REQUEST_TO_PUBLISH up the tree; the first allowed node
  re-publishes it (publisher = itself, author = the requester, `request` = the requester's id, which
  is the message id everyone logs). A node outside the tree routes events and requests toward the author.
- LEAVE: tree neighbours drop the edge; a forwarder left with no children and no subscription leaves
  too; a child whose parent left joins again.
- Repair: a lost parent is re-sent the JOIN `join_retries` times (`retry_interval` apart); then the
  node JOINs through the next closest peer. The author's failure is fatal to its topic (as in the
  thesis's own evaluation): its subscribers keep trying.
- History rebuild: walk parent links from the newest event, local store first, then the DHT. It runs
  on demand (control API POST /history) and, with `history: on-gap`, when an event's parent has not
  arrived `gap_wait` seconds after it (a NACK, as the thesis puts it). Recovered events are logged as
  history_event, the walk as one `history` event; they are not deliver_message (the tree's work).
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Literal

from google.protobuf.message import DecodeError
from pydantic import Field

from node.protocols.base import Unsupported
from node.protocols.dht.core import DhtCore
from node.protocols.dht.kademlia import DhtParams
from node.protocols.dht.table import content_key, node_key
from node.protocols.pulsarcast.pulsarcast_pb2 import EventDescriptor, Message, SubTopic, TopicDescriptor
from node.protocols.pulsarcast.trees import Tree, Trees, descriptor_id

VERSION = "peerlab-pulsarcast/1"
Op = Message.Op


class PulsarCastParams(DhtParams):
    publishers: Literal["author", "everyone"] = Field(
        "author", description="author: only a topic's author publishes (allowedPublishers = [author]); "
                              "everyone: allowedPublishers disabled")
    request_to_publish: bool = Field(True, description="a node not allowed to publish asks up the tree")
    event_linking: Literal["last-seen", "custom"] = Field("last-seen", description="how an event's parent is chosen")
    subscribe_meta: bool = Field(True, description="subscribers also join the topic's meta topic")
    join_retries: int = Field(2, ge=0, le=10, description="JOINs re-sent to a lost parent before choosing another")
    retry_interval: float = Field(1.0, gt=0, description="seconds between JOIN retries and name lookups")
    history: Literal["never", "on-gap"] = Field("on-gap", description="rebuild history when an event's parent "
                                                                       "is missing (else only on request)")
    gap_wait: float = Field(2.0, gt=0, description="seconds a missing parent may take to arrive by the tree")


def name_key(name: str) -> int:
    return content_key("pulsarcast/name/" + name)


class PulsarCast(Trees, DhtCore):
    name = "pulsarcast"
    Params = PulsarCastParams
    AppMessage = Message
    topic_authors = True
    control_actions = ("history",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.store: dict[str, TopicDescriptor | EventDescriptor] = {}
        self.names: dict[str, str] = {}            # topic name -> id (its newest version known)
        self.trees: dict[str, Tree] = {}           # topic id -> tree state
        self.wanted: set[str] = set()              # names the app subscribed to
        self.seen: set[str] = set()                # event ids seen
        self.seqno = int(self.clock() * 1e6)
        self.pending_publish: dict[str, list[tuple[bytes, str | None, str]]] = {}
        self.history_runs = 0

    # app ---------------------------------------------------------------------------------------
    def create_topic(self, name: str) -> str:
        """Author a topic (seed Algorithm 1); returns its id."""
        now = int(self.clock() * 1e9)
        meta = TopicDescriptor(name=name + "/meta", author=self.node_id, created_ns=now,
                               protocol_version=VERSION, allowed_publishers=True, publishers=[self.node_id])
        meta_id = self._keep(meta)
        topic = TopicDescriptor(name=name, author=self.node_id, created_ns=now, protocol_version=VERSION,
                                sub_topics=[SubTopic(name="meta", id=meta_id)],
                                allowed_publishers=self.params.publishers == "author",
                                publishers=[self.node_id] if self.params.publishers == "author" else [],
                                request_to_publish=self.params.request_to_publish,
                                event_linking=(TopicDescriptor.CUSTOM if self.params.event_linking == "custom"
                                               else TopicDescriptor.LAST_SEEN))
        tid = self._keep(topic)
        self.names[name] = tid
        for desc_id in (meta_id, tid):
            self.trees[desc_id] = Tree(self.store[desc_id], subscribed=True, joined=True)

        def stored(_copies: int = 0) -> None:
            self.dht.put(name_key(name), tid.encode())
            self._publish_event(self.trees[meta_id], tid.encode(), None, request="")
        self.dht.when_bootstrapped(lambda: self._put_descriptor(meta_id, lambda _c: self._put_descriptor(tid, stored)))
        self.io.trace("topic_created", topic=name, msg_id=tid)
        return tid

    def subscribe(self, topic: str) -> None:
        if topic in self.wanted:
            return
        self.wanted.add(topic)
        self.io.trace("join", topic=topic)
        self._with_name(topic, lambda tid: self._subscribe_id(tid, meta=False))

    def unsubscribe(self, topic: str) -> None:
        if topic not in self.wanted:
            return
        self.wanted.discard(topic)
        self.io.trace("leave", topic=topic)
        tid = self.names.get(topic)
        tree = self.trees.get(tid or "")
        if tree is not None:
            tree.subscribed = False
            self._maybe_leave(tid)

    def publish(self, topic: str, data: bytes, parent: str | None = None) -> str:
        self.seqno += 1
        # the message id is known before the topic is resolved: the id of the request
        msg_id = hashlib.sha256(f"{self.node_id}/{self.seqno}".encode() + data).hexdigest()
        self.io.trace("publish_message", topic=topic, msg_id=msg_id, size=len(data), seq=self.seqno)
        tid = self.names.get(topic)
        if tid is None:
            self.pending_publish.setdefault(topic, []).append((data, parent, msg_id))
            if len(self.pending_publish[topic]) == 1:
                self._with_name(topic, self._flush_pending(topic))
            return msg_id
        self._publish_now(tid, data, parent, msg_id)
        return msg_id

    def history(self, topic: str) -> None:
        """Rebuild the topic's history from its newest event seen here (control API)."""
        tid = self.names.get(topic)
        if tid is None or not self.trees.get(tid) or not self.trees[tid].last_seen:
            raise Unsupported(f"no event of topic {topic!r} seen here yet: nothing to walk back from")
        self._rebuild(tid, self.trees[tid].last_seen, "request")

    # naming and descriptors --------------------------------------------------------------------
    def _keep(self, desc: TopicDescriptor | EventDescriptor) -> str:
        desc_id = descriptor_id(desc)
        self.store[desc_id] = desc
        return desc_id

    def _put_descriptor(self, desc_id: str, done: Callable[[int], None] | None = None) -> None:
        self.dht.put(content_key(desc_id), self.store[desc_id].SerializeToString(deterministic=True), done)

    def _with_name(self, name: str, then: Callable[[str], None], delay: float | None = None) -> None:
        """Resolve a topic name through the DHT (retrying until its author has stored it)."""
        if name in self.names:
            then(self.names[name])
            return

        def got(raw: bytes | None) -> None:
            if raw is None:
                wait = min(10.0, (delay or self.params.retry_interval / 2) * 2)
                self.io.set_timer(wait, "pc.resolve", (name, then, wait))
                return
            tid = raw.decode(errors="replace")
            self._with_topic(tid, lambda desc: self._named(name, tid, desc, then))
        self.dht.when_bootstrapped(lambda: self.dht.get(name_key(name), got))

    def _named(self, name: str, tid: str, desc: TopicDescriptor | None, then: Callable[[str], None]) -> None:
        if desc is None or desc.name != name:
            self.io.set_timer(self.params.retry_interval, "pc.resolve", (name, then, self.params.retry_interval))
            return
        self.names.setdefault(name, tid)
        then(self.names[name])

    def _with_topic(self, tid: str, then: Callable[[TopicDescriptor | None], None]) -> None:
        """The topic descriptor by id: local store, else the DHT (verified against its id)."""
        desc = self.store.get(tid)
        if isinstance(desc, TopicDescriptor):
            then(desc)
            return

        def got(raw: bytes | None) -> None:
            found = None
            if raw is not None:
                candidate = TopicDescriptor()
                try:
                    candidate.ParseFromString(raw)
                except DecodeError:
                    candidate = None
                if candidate is not None and descriptor_id(candidate) == tid:
                    self.store[tid] = found = candidate
            then(found)
        self.dht.get(content_key(tid), got)

    # events ------------------------------------------------------------------------------------
    def _flush_pending(self, topic: str) -> Callable[[str], None]:
        def flush(tid: str) -> None:
            for data, parent, msg_id in self.pending_publish.pop(topic, []):
                self._publish_now(tid, data, parent, msg_id)
        return flush

    def _allowed(self, topic: TopicDescriptor, node: str) -> bool:
        return not topic.allowed_publishers or node in topic.publishers

    def _publish_now(self, tid: str, data: bytes, parent: str | None, msg_id: str) -> None:
        def go(desc: TopicDescriptor | None) -> None:
            if desc is None:
                self.io.trace("reject_message", topic=self.store_name(tid), msg_id=msg_id, peer=self.node_id,
                              reason="topic descriptor not found")
                return
            tree = self.trees.setdefault(tid, Tree(desc))
            if self._allowed(desc, self.node_id):
                self._publish_event(tree, data, parent, request=msg_id)
            elif desc.request_to_publish:
                request = EventDescriptor(name=desc.name, author=self.node_id, topic=tid, payload=data,
                                          parent=parent or "", created_ns=int(self.clock() * 1e9),
                                          protocol_version=VERSION, request=msg_id)
                self._towards_author(tree, Message(op=Op.REQUEST_TO_PUBLISH, event=request), exclude=None)
            else:
                self.io.trace("reject_message", topic=desc.name, msg_id=msg_id, peer=self.node_id,
                              reason="not an allowed publisher")
        self._with_topic(tid, go)

    def store_name(self, tid: str) -> str:
        desc = self.store.get(tid)
        return desc.name if isinstance(desc, TopicDescriptor) else tid

    def _publish_event(self, tree: Tree, data: bytes, parent: str | None, request: str, author: str = "") -> None:
        linking = tree.topic.event_linking
        link = (parent or "") if linking == TopicDescriptor.CUSTOM else tree.last_seen
        event = EventDescriptor(name=tree.topic.name, publisher=self.node_id, author=author or self.node_id,
                                parent=link, topic=descriptor_id(tree.topic), payload=data,
                                created_ns=int(self.clock() * 1e9), protocol_version=VERSION, request=request)
        eid = self._keep(event)
        self.seen.add(eid)
        tree.last_seen = eid
        self._put_descriptor(eid)
        if tree.parent is None and not tree.children and tree.topic.author != self.node_id:
            self._towards_author(tree, Message(op=Op.PUBLISH_EVENT, event=event), exclude=None)
        else:
            self._disseminate(tree, event, exclude=None)

    def _towards_author(self, tree: Tree, msg: Message, exclude: str | None) -> None:
        """Route a message up: to the parent if in the tree, else to the next hop toward the author."""
        if tree.parent is not None and tree.parent != exclude:
            self._send(tree.parent, msg)
            return
        self.next_hop(node_key(tree.topic.author), {exclude} if exclude else set(),
                       lambda hop: hop and self._send(hop, msg))

    def _disseminate(self, tree: Tree, event: EventDescriptor, exclude: str | None) -> None:
        msg = Message(op=Op.PUBLISH_EVENT, event=event)
        for peer in sorted(tree.children | ({tree.parent} if tree.parent else set())):
            if peer != exclude:
                self._send(peer, msg, data=len(event.payload))

    def _on_event(self, peer: str, event: EventDescriptor) -> None:
        eid = descriptor_id(event)
        label = event.request or eid
        if eid in self.seen:
            self.io.trace("duplicate_message", topic=event.name, msg_id=label, peer=peer, size=len(event.payload))
            return
        tid = event.topic
        tree = self.trees.get(tid)
        if tree is None:  # not in the tree: pass it on toward the author, where the tree is
            self.seen.add(eid)
            self._with_topic(tid, lambda desc: desc and self._towards_author(
                self.trees.get(tid) or Tree(desc), Message(op=Op.PUBLISH_EVENT, event=event), exclude=peer))
            return
        self.seen.add(eid)
        self.store[eid] = event
        if event.parent and event.parent not in self.seen and self.params.history == "on-gap":
            self.io.set_timer(self.params.gap_wait, "pc.gap", (tid, eid))
        tree.last_seen = eid
        if tree.subscribed and tid not in self._meta_ids():
            self.io.trace("deliver_message", topic=event.name, msg_id=label, origin=event.author, peer=peer,
                          size=len(event.payload))
            self.io.deliver(event.name, label, event.payload, event.author)
        self._disseminate(tree, event, exclude=peer)

    def _meta_ids(self) -> set[str]:
        return {sub.id for t in self.trees.values() for sub in t.topic.sub_topics if sub.name == "meta"}

    def _on_request(self, peer: str, request: EventDescriptor) -> None:
        def go(desc: TopicDescriptor | None) -> None:
            if desc is None or not desc.request_to_publish:
                return
            tree = self.trees.get(request.topic) or Tree(desc)
            if self._allowed(desc, self.node_id):
                if request.request in self.seen:
                    return
                self.seen.add(request.request)
                self.trees.setdefault(request.topic, tree)
                self._publish_event(tree, request.payload, request.parent or None, request=request.request,
                                    author=request.author)
            else:
                self._towards_author(tree, Message(op=Op.REQUEST_TO_PUBLISH, event=request), exclude=peer)
        self._with_topic(request.topic, go)

    # wire --------------------------------------------------------------------------------------
    def _send(self, peer: str, msg: Message, data: int = 0) -> None:
        msg.created_ns = int(self.clock() * 1e9)
        msg.protocol_version = VERSION
        self.send_msg(peer, msg, data)

    def on_message(self, peer: str, msg: Message, body: str | None) -> None:
        if msg.op == Op.PUBLISH_EVENT and body == "event":
            self._on_event(peer, msg.event)
        elif msg.op == Op.REQUEST_TO_PUBLISH and body == "event":
            self._on_request(peer, msg.event)
        elif msg.op == Op.JOIN_TOPIC and body == "topic_id":
            self._on_join(peer, msg.topic_id)
        elif msg.op == Op.LEAVE_TOPIC and body == "topic_id":
            self._on_leave(peer, msg.topic_id)

    def on_peer_down(self, peer: str) -> None:
        super().on_peer_down(peer)
        for tid, tree in list(self.trees.items()):
            tree.children.discard(peer)
            if tree.parent == peer:
                self._lost_parent(tid, retry=True)

    def on_app_unreachable(self, peer: str) -> None:
        for tid, tree in list(self.trees.items()):
            tree.children.discard(peer)
            if tree.parent == peer:
                self._lost_parent(tid, retry=False)

    def on_app_timer(self, name: str, data: Any) -> None:
        if name == "pc.resolve":
            topic, then, wait = data
            self._with_name(topic, then, wait)
        elif name == "pc.rejoin":
            if data in self.trees:
                self._join(data)
        elif name == "pc.retry":
            tid, lost = data
            tree = self.trees.get(tid)
            if tree is not None and tree.parent is None:
                tree.parent = lost
                self._send(lost, Message(op=Op.JOIN_TOPIC, topic_id=tid))
        elif name == "pc.gap":
            tid, eid = data
            event = self.store.get(eid)
            if isinstance(event, EventDescriptor) and event.parent not in self.seen and tid in self.trees:
                self._rebuild(tid, eid, "gap")

    def status(self) -> dict[str, Any]:
        trees = {t.topic.name: {"parent": t.parent, "children": sorted(t.children), "subscribed": t.subscribed}
                 for t in self.trees.values()}
        return {**super().status(), "topics": sorted(self.wanted), "trees": trees, "events": len(self.seen),
                "history_runs": self.history_runs}
