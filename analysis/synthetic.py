"""Synthetic event tables for the analysis benchmark: a gossip-like run of any size, written straight
to the layout of a run's events table (`events/run=<id>/part-*.parquet`, the typed columns of
`node/events.schema.json`, as many files as the table of a run of that size has).

The shape of a message: every subscriber of its topic but the publisher is an expected receiver;
each receives it with probability `delivery` after a log-normal latency, and gets a Poisson number of
duplicates; each receipt (first or duplicate) is one send_rpc at a random sender and one recv_rpc at
the receiver; control-only RPCs (heartbeats) make up the rest. About 7.5 events per expected
receiver. Deterministic for a seed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from analysis.ingest import event_arrow_schema
from analysis.spark import partitions_for
from node import ids

T0_NS = 1_700_000_000 * 10**9
MSG_SPACING_NS = 5_000_000  # one publish every 5 ms network-wide


@dataclass(frozen=True)
class Shape:
    nodes: int = 100
    topics: int = 4
    subscriptions: int = 2      # topics per node
    delivery: float = 0.99      # chance an expected receiver gets a message
    duplicates: float = 1.5     # mean duplicates per receipt
    control_rpcs: float = 0.5   # control-only RPCs per expected receiver
    size: int = 1024


def subscriptions(shape: Shape, seed: int) -> list[tuple[str, str]]:
    """(node, topic): every node joins `shape.subscriptions` distinct topics."""
    rng = np.random.default_rng(seed)
    return [(f"n{i}", f"t{t}") for i in range(shape.nodes)
            for t in sorted(rng.choice(shape.topics, size=shape.subscriptions, replace=False))]


def events_per_message(shape: Shape) -> float:
    receivers = shape.nodes * shape.subscriptions / shape.topics - 1
    per_receiver = shape.delivery * (1 + shape.duplicates) * 3 + shape.control_rpcs * 2
    return 1 + receivers * per_receiver


def _batches(shape: Shape, subs: list[tuple[str, str]], events: int, seed: int,
             run: str) -> Iterator[pa.RecordBatch]:
    schema = event_arrow_schema()
    rng = np.random.default_rng(seed + 1)
    node_names = pa.array([f"n{i}" for i in range(shape.nodes)])
    members = [np.array([ids.node_index(n) for n, t in subs if t == f"t{k}"]) for k in range(shape.topics)]
    per_message = events_per_message(shape)
    first, written = 0, 0
    while written < events:
        chunk = max(1, min(2_000, round((events - written) / per_message)))  # messages in this batch
        m = np.arange(first, first + chunk)
        topic = rng.integers(0, shape.topics, size=chunk)
        origin = np.array([rng.choice(members[k]) for k in topic])
        t_pub = T0_NS + m * MSG_SPACING_NS
        # expected receivers: the topic's members but the origin
        recv_msg, recv_node = [], []
        for i, k in enumerate(topic):
            others = members[k][members[k] != origin[i]]
            recv_msg.append(np.full(others.size, i))
            recv_node.append(others)
        recv_msg, recv_node = np.concatenate(recv_msg), np.concatenate(recv_node)
        got = rng.random(recv_msg.size) < shape.delivery
        d_msg, d_node = recv_msg[got], recv_node[got]
        d_ts = t_pub[d_msg] + (rng.lognormal(np.log(80.0), 0.5, d_msg.size) * 1e6).astype(np.int64)
        dups = rng.poisson(shape.duplicates, d_msg.size)
        u_msg, u_node = np.repeat(d_msg, dups), np.repeat(d_node, dups)
        u_ts = np.repeat(d_ts, dups) + rng.integers(1, 50_000_000, u_msg.size)
        # one RPC per receipt (first or duplicate), sent by a random node
        r_msg, r_node = np.concatenate([d_msg, u_msg]), np.concatenate([d_node, u_node])
        r_ts = np.concatenate([d_ts, u_ts])
        r_from = rng.integers(0, shape.nodes, r_msg.size)
        c_n = int(recv_msg.size * shape.control_rpcs)
        c_from, c_to = rng.integers(0, shape.nodes, c_n), rng.integers(0, shape.nodes, c_n)
        c_ts = T0_NS + first * MSG_SPACING_NS + rng.integers(0, chunk * MSG_SPACING_NS, c_n)
        c_bytes = rng.integers(20, 400, c_n)
        msg_ids = pa.array([f"m{x:09d}" for x in m])
        topics = pa.array([f"t{k}" for k in range(shape.topics)])
        data = shape.size + 40

        parts = [  # (type, node idx, ts, msg idx or None, peer idx or None, bytes, data_bytes)
            ("publish_message", origin, t_pub, np.arange(chunk), None, None, None),
            ("deliver_message", d_node, d_ts, d_msg, r_from[:d_msg.size], None, None),
            ("duplicate_message", u_node, u_ts, u_msg, r_from[d_msg.size:], None, None),
            ("send_rpc", r_from, r_ts - 1_000_000, None, r_node, np.full(r_msg.size, data), np.full(r_msg.size, shape.size)),
            ("recv_rpc", r_node, r_ts, None, r_from, np.full(r_msg.size, data), np.full(r_msg.size, shape.size)),
            ("send_rpc", c_from, c_ts, None, c_to, c_bytes, np.zeros(c_n, dtype=np.int64)),
            ("recv_rpc", c_to, c_ts + 1_000_000, None, c_from, c_bytes, np.zeros(c_n, dtype=np.int64)),
        ]
        cols: dict[str, list[pa.Array]] = {name: [] for name in schema.names}
        for kind, node, ts, msg, peer, nbytes, data_bytes in parts:
            n = len(ts)
            given = {"ts": pa.array(ts, pa.int64()), "node": node_names.take(pa.array(node)),
                     "type": pa.repeat(kind, n)}
            if msg is not None:
                given["msg_id"] = msg_ids.take(pa.array(msg))
                given["topic"] = topics.take(pa.array(topic[msg]))
                given["size"] = pa.array(np.full(n, shape.size), pa.int64())
            if kind == "deliver_message":
                given["origin"] = node_names.take(pa.array(origin[msg]))
            if kind == "publish_message":
                given["seq"] = pa.array(m, pa.int64())
            if peer is not None:
                given["peer"] = node_names.take(pa.array(peer))
            if nbytes is not None:
                given["bytes"] = pa.array(nbytes, pa.int64())
                given["data_bytes"] = pa.array(data_bytes, pa.int64())
            for field in schema:
                cols[field.name].append(given.get(field.name, pa.nulls(n, field.type)))
        batch = pa.RecordBatch.from_arrays([pa.concat_arrays(cols[f.name]) for f in schema], schema=schema)
        batch = batch.append_column("run", pa.repeat(run, batch.num_rows))
        yield batch
        written += batch.num_rows
        first += chunk


# compressed event-log bytes per event, which size a run's events table (8.6 on the stored 1000-node
# simulation, 11.4 on a quickstart run)
LOG_BYTES_PER_EVENT = 10


def generate(out: Path, events: int, shape: Shape = Shape(), seed: int = 1,
             run: str = "synthetic") -> list[tuple[str, str]]:
    """Write about `events` events (whole messages: a little more or less) under `out`; returns the
    subscriptions."""
    subs = subscriptions(shape, seed)
    batches = _batches(shape, subs, events, seed, run)
    first = next(batches)
    per_file = -(-events // partitions_for(events * LOG_BYTES_PER_EVENT, os.cpu_count() or 1))
    ds.write_dataset(
        _chain(first, batches), out, schema=first.schema, format="parquet", basename_template="part-{i}.parquet",
        partitioning=ds.partitioning(pa.schema([("run", pa.string())]), flavor="hive"),
        existing_data_behavior="delete_matching", max_rows_per_file=per_file,
        min_rows_per_group=min(200_000, per_file), max_rows_per_group=min(1_000_000, per_file))
    return subs


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
