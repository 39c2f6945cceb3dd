"""The node's event log: JSON lines checked against `events.schema.json`, written and flushed per event.

Flushing each line means a node killed with SIGKILL loses nothing it had logged.
"""
from __future__ import annotations

import json
import time
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, TextIO

_PY_TYPES = {"long": int, "string": str, "boolean": bool, "double": (int, float)}


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The checked-in event schema, shared by the node and the analysis."""
    text = resources.files("node").joinpath("events.schema.json").read_text()
    return json.loads(text)


class SchemaError(ValueError):
    pass


@lru_cache(maxsize=1)
def _field_kinds() -> dict[str, dict[str, tuple[str, Any]]]:
    """Per event type, each allowed field's schema kind and Python type (the common fields win)."""
    schema = load_schema()
    out = {}
    for name, spec in schema["events"].items():
        kinds = {**{f: schema["fields"][f] for f in spec["fields"]}, **schema["common"]}
        out[name] = {f: (kind, _PY_TYPES[kind]) for f, kind in kinds.items()}
    return out


def check_event(event: dict[str, Any]) -> None:
    """Raise SchemaError unless `event` has a known type and only that type's fields, typed right."""
    fields = _field_kinds().get(event.get("type"))
    if fields is None:
        raise SchemaError(f"unknown event type {event.get('type')!r}")
    for key, value in event.items():
        expected = fields.get(key)
        if expected is None:
            raise SchemaError(f"event {event['type']!r} has no field {key!r}")
        if value is None:
            continue
        kind, py_type = expected
        if not isinstance(value, py_type):
            raise SchemaError(f"event {event['type']!r}: field {key!r} should be {kind}, got {value!r}")
        if value.__class__ is bool and kind == "long":
            raise SchemaError(f"event {event['type']!r}: field {key!r} should be long, got a boolean")


class EventLog:
    """Append-only JSON-lines log for one node."""

    def __init__(self, node_id: str, sink: TextIO, clock_ns: Callable[[], int] = time.time_ns,
                 check: bool = True):
        self.node_id = node_id
        self._sink = sink
        self._clock_ns = clock_ns
        self._check = check
        self.counts: dict[str, int] = {}

    @classmethod
    def open(cls, node_id: str, path: str | Path, **kwargs: Any) -> "EventLog":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered text: every newline reaches the kernel at once.
        return cls(node_id, open(path, "a", buffering=1, encoding="utf-8"), **kwargs)

    def emit(self, type_: str, **fields: Any) -> None:
        event = {"ts": self._clock_ns(), "node": self.node_id, "type": type_, **fields}
        if self._check:
            check_event(event)
        self._sink.write(json.dumps(event, separators=(",", ":")) + "\n")
        self.counts[type_] = self.counts.get(type_, 0) + 1

    def close(self) -> None:
        self._sink.flush()
        self._sink.close()
