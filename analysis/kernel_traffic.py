"""Traffic as the kernel counted it on every node's link (`kernel_traffic.jsonl.gz`, sampled each
second by the runner; orchestrator/run/link_sampler.py), for any node implementation: bytes sent and
received per node, the mean upload over the publishing window, and, where the nodes also logged what
they sent (`send_rpc`), the ratios of the two, both from T0 on (start-up and calibration left out): all bytes (TCP/IP headers and acknowledgements,
encryption and multiplexing, retransmissions are what the kernel sees beyond the protocol's own
bytes) and the payload after the headers (what the sockets carried).

Pure functions of frames and rows: the metrics.json sections and tables made of them are registered
in analysis/catalogue.py. May import: analysis.spark; never registry, run_data or catalogue."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from analysis.spark import local_frame

FILE = "kernel_traffic.jsonl.gz"
HEADER_BYTES = 66  # Ethernet 14 + IPv4 20 + TCP 32 (with timestamps): one set per packet the link counts
COUNTERS = ("sent_bytes", "received_bytes", "sent_packets", "received_packets")


def load_samples(run_dir: Path) -> list[dict[str, Any]]:
    """The run's link counter samples (FILE in its directory), oldest first; none without the file."""
    path = run_dir / FILE
    if not path.exists():
        return []
    with gzip.open(path, "rt") as f:
        samples = [json.loads(line) for line in f if line.strip()]
    return sorted(samples, key=lambda s: s["ts"])  # a sample at T0 may be written after a later one


def per_node_totals(samples: list[dict[str, Any]], since_ns: int = 0, until_ns: int | None = None) -> dict[str, dict[str, int]]:
    """Each node's counters' growth between its first and last sample inside [since, until], and the
    time between those two samples (`span_ns`)."""
    first: dict[str, dict[str, Any]] = {}
    last: dict[str, dict[str, Any]] = {}
    for s in samples:
        if s["ts"] < since_ns or (until_ns is not None and s["ts"] > until_ns):
            continue
        first.setdefault(s["node"], s)
        last[s["node"]] = s
    return {node: {**{c: last[node][c] - first[node][c] for c in COUNTERS},
                   "span_ns": last[node]["ts"] - first[node]["ts"]} for node in first}


def kernel_summary(samples: list[dict[str, Any]], window: tuple[int, int] | None,
                   logged_sent: dict[str, int], since_ns: int = 0) -> dict[str, Any] | None:
    """Totals from `since_ns` (T0: start-up and calibration traffic left out) to the last sample."""
    if not samples:
        return None
    whole = per_node_totals(samples, since_ns)
    out: dict[str, Any] = {
        "nodes": len(whole),
        "sent_bytes": sum(t["sent_bytes"] for t in whole.values()),
        "received_bytes": sum(t["received_bytes"] for t in whole.values()),
        "sent_packets": sum(t["sent_packets"] for t in whole.values()),
    }
    if window and window[1] > window[0]:
        # over the samples' own span inside the window (on Kubernetes they may be seconds apart)
        rates = [t["sent_bytes"] * 8 / 1e6 / (t["span_ns"] / 1e9)
                 for t in per_node_totals(samples, *window).values() if t["span_ns"] > 0]
        if rates:
            out["mean_mbit_per_node"] = sum(rates) / len(rates)
    # what the sockets carried: every packet's headers off (a GSO packet is counted once, with one set)
    out["sent_payload_bytes"] = out["sent_bytes"] - HEADER_BYTES * out["sent_packets"]
    logged = sum(logged_sent.values())
    if logged:
        out["logged_sent_bytes"] = logged
        out["kernel_over_logged"] = out["sent_bytes"] / logged
        out["payload_over_logged"] = out["sent_payload_bytes"] / logged
    return out


def deltas_frame(spark: SparkSession, samples: list[dict[str, Any]], t0_ns: int) -> DataFrame | None:
    """The kernel_traffic table: per node per sample since T0, bytes sent and received on its link since
    its sample before (counter deltas), at the second of the sample and over `seconds` (1 where it
    samples each second; several on Kubernetes, where a sample is an exec per pod). None without samples."""
    if not samples:
        return None
    rows, previous = [], {}
    for s in samples:
        before = previous.get(s["node"])
        previous[s["node"]] = s
        if before is not None:
            rows.append((int((s["ts"] - t0_ns) // 1e9), round((s["ts"] - before["ts"]) / 1e9, 3), s["node"],
                         s["sent_bytes"] - before["sent_bytes"], s["received_bytes"] - before["received_bytes"]))
    return local_frame(spark, rows,
                       "second long, seconds double, node string, sent_bytes long, received_bytes long")
