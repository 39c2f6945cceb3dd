"""The mesh and relaying metrics (analysis/relaying.py) on hand-built events whose answers are
worked out by hand: what explains how many copies a node forwards, and how soon."""
import pytest

from analysis.ingest import event_struct
from analysis.relaying import mesh_sizes, mesh_summary, relay_summary, relays

pytestmark = pytest.mark.spark
S, MS = 1_000_000_000, 1_000_000


def frame(spark, rows):
    fields = event_struct().fieldNames()
    return spark.createDataFrame([tuple(r.get(f) for f in fields) for r in rows], event_struct())


def ev(ts, type_, **fields):
    return {"ts": ts, "node": fields.pop("node", "a"), "type": type_, **fields}


def test_mesh_and_relaying_follow_grafts_prunes_and_forwards(spark):
    events = frame(spark, [
        ev(0, "send_rpc", peer="b", bytes=10, graft=1),            # b joins a's mesh
        ev(1 * MS, "recv_rpc", peer="c", bytes=10, graft=1),       # c joins (a GRAFT either way)
        ev(2 * MS, "send_rpc", peer="b", bytes=10, graft=1),       # b again: no change
        ev(3 * S, "deliver_message", msg_id="m1", peer="b"),         # mesh 2; alone: relayed twice
        ev(3 * S + 5 * MS, "send_rpc", peer="b", bytes=120, data_bytes=100),
        ev(3 * S + 20 * MS, "send_rpc", peer="c", bytes=120, data_bytes=100),
        ev(3 * S + 30 * MS, "send_rpc", peer="c", bytes=30, idontwant=1),   # control only: not a forward
        ev(3 * S + 500 * MS, "recv_rpc", peer="b", bytes=10, prune=1),        # b leaves
        ev(6 * S, "deliver_message", msg_id="m2", peer="c"),         # mesh 1; alone: no forward
        ev(10 * S, "deliver_message", msg_id="m3", peer="c"),        # mesh 1; not alone (m4 0.5 s later)
        ev(10 * S + 100 * MS, "send_rpc", peer="c", bytes=120, data_bytes=100),
        ev(10 * S + 500 * MS, "deliver_message", msg_id="m4", peer="c"),      # mesh 1; not alone
        ev(3 * S, "deliver_message", node="z", msg_id="m1", peer="a"),        # z logs no RPCs: mesh 0
    ])
    sizes = {(r["node"], r["ts"]): r["size"] for r in mesh_sizes(events).collect()}
    assert sizes == {("a", 3 * S): 2, ("a", 6 * S): 1, ("a", 10 * S): 1, ("a", 10 * S + 500 * MS): 1, ("z", 3 * S): 0}
    assert mesh_summary(mesh_sizes(events)) == {"mean_at_delivery": 1.0, "sizes_at_delivery": {"0": 1, "1": 3, "2": 1}}
    per_delivery = {(r["node"], r["delivered"]): r for r in relays(events).collect()}
    assert set(per_delivery) == {("a", 3 * S), ("a", 6 * S), ("z", 3 * S)}
    assert per_delivery[("a", 3 * S)]["forwards"] == 2
    assert per_delivery[("a", 3 * S)]["first_ms"] == pytest.approx(5.0)
    assert per_delivery[("a", 3 * S)]["last_ms"] == pytest.approx(20.0)
    assert per_delivery[("a", 6 * S)]["forwards"] == 0 and per_delivery[("a", 6 * S)]["first_ms"] is None
    summary = relay_summary(relays(events))
    assert summary["deliveries_used"] == 3 and summary["forwards_per_delivery"] == pytest.approx(2 / 3, abs=0.01)
    assert summary["first_forward_ms"]["p50"] == pytest.approx(5.0)
    assert summary["last_forward_ms"]["p50"] == pytest.approx(20.0)


def test_no_rpcs_logged_means_no_mesh_figure(spark):
    events = frame(spark, [ev(3 * S, "deliver_message", msg_id="m1", peer="b")])
    assert mesh_summary(mesh_sizes(events)) is None
    assert relay_summary(relays(events)) is None
