"""The event log: checked against the shared schema, on disk line by line as events happen."""
import json

import pytest

from node.eventlog import EventLog, SchemaError, check_event, load_schema


def test_schema_rejects_unknown_types_fields_and_wrong_types():
    with pytest.raises(SchemaError, match="unknown event type"):
        check_event({"ts": 1, "node": "n0", "type": "teleport"})
    with pytest.raises(SchemaError, match="no field 'colour'"):
        check_event({"ts": 1, "node": "n0", "type": "join", "topic": "t", "colour": "red"})
    with pytest.raises(SchemaError, match="should be long"):
        check_event({"ts": 1, "node": "n0", "type": "send_rpc", "peer": "n1", "bytes": "many"})
    check_event({"ts": 1, "node": "n0", "type": "send_rpc", "peer": "n1", "bytes": 10, "data_bytes": 4})


def test_every_field_of_every_event_has_a_type():
    schema = load_schema()
    for spec in schema["events"].values():
        assert set(spec["fields"]) <= set(schema["fields"])


def test_events_are_on_disk_before_close(tmp_path):
    path = tmp_path / "n0.jsonl"
    log = EventLog.open("n0", path, clock_ns=lambda: 42)
    log.emit("join", topic="t")
    log.emit("publish_message", topic="t", msg_id="n0-1", size=10, seq=1)
    # not closed: a SIGKILL now would lose nothing
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == [{"ts": 42, "node": "n0", "type": "join", "topic": "t"},
                     {"ts": 42, "node": "n0", "type": "publish_message", "topic": "t", "msg_id": "n0-1", "size": 10, "seq": 1}]
    log.close()
