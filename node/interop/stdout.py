"""A gossipsub-interop binary's stdout (one JSON object per line, each with `time` (RFC 3339) and `msg`)
turned into peerlab's events: `PeerID` -> `ready`; `Received Message` (every copy, `id` in base 10,
`from` the sender's peer id) -> `deliver_message` for the first copy of a message, `duplicate_message`
for every later one and for a copy of the node's own message (a library logs one coming back, as
go-libp2p-pubsub's tracer does). Other lines are the binary's own and are left out."""
from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from node.interop.script import message_of

_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def unix_ns(stamp: str) -> int:
    """An RFC 3339 time (any number of fractional digits) in unix nanoseconds."""
    m = _RFC3339.match(stamp.strip())
    if not m:
        raise ValueError(f"not an RFC 3339 time: {stamp!r}")
    whole, fraction, zone = m.groups()
    seconds = int(datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp())
    return seconds * 1_000_000_000 + int(((fraction or "") + "000000000")[:9])


class Stdout:
    """One node's stdout, line by line. `node`: its peerlab id; `names`: interop peer id -> peerlab node
    id; `topics`: the node's subscriptions, for a `Received Message` that does not say its topic."""

    def __init__(self, node: str, names: dict[str, str], topics: list[str]):
        self.node = node
        self.names = names
        self.topics = topics
        self.seen: set[str] = set()
        self.peer_id: str | None = None

    def events(self, line: str) -> list[dict[str, Any]]:
        try:
            record = json.loads(line)
        except ValueError:
            return []
        if not isinstance(record, dict) or "time" not in record:
            return []
        kind = record.get("msg")
        if kind == "PeerID":
            self.peer_id = str(record.get("id"))
            return [{"ts": unix_ns(record["time"]), "type": "ready"}]
        if kind != "Received Message" or "id" not in record:
            return []
        msg_id, origin, size = message_of(int(record["id"]))
        sender = self.names.get(str(record.get("from")), "unknown")
        topic = record.get("topic") or (self.topics[0] if len(self.topics) == 1 else "")
        event: dict[str, Any] = {"ts": unix_ns(record["time"]), "topic": topic, "msg_id": msg_id, "peer": sender,
                                 "size": size}
        if msg_id in self.seen or origin == self.node:
            return [{**event, "type": "duplicate_message"}]
        self.seen.add(msg_id)
        return [{**event, "type": "deliver_message", "origin": origin}]
