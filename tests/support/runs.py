"""Runs built by hand: one whose metrics are computed by hand (tests/analysis), and stored runs that
are only a manifest and a metrics.json (what `peerlab compare` reads)."""
import gzip
import json
from pathlib import Path

MS = 1_000_000


def write_run(run_dir: Path) -> None:
    # 4 nodes; topic a: n0 n1 n2 n3 subscribed; topic b: n1 only.
    nodes = [{"id": f"n{i}", "subscriptions": ["a"] + (["b"] if i == 1 else [])} for i in range(4)]
    # n3's clock runs 7 ms ahead: it logs every event 7 ms late, and the manifest says so
    manifest = {"run_id": "hand", "backend": "local", "status": "completed", "scenario": {"name": "hand"},
                "plan": {"protocol": "floodsub", "nodes": nodes, "warmup": 0.0, "duration": 1.0, "drain": 1.0},
                "t0_ns": 1_000_000_000_000, "clock": {"offsets_ns": {"n3": 7 * MS, "n0": 0}},
                "shaping": {"mode": "transport"},
                "calibration": {"latency_error_pct": 1.5, "bandwidth_error_pct": 3.0, "rtt": [], "throughput": []}}
    (run_dir / "events").mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    ev = {f"n{i}": [] for i in range(4)}

    def e(node, ts_ms, type_, **kw):
        skew = 7 if node == "n3" else 0
        ev[node].append({"ts": 1_000_000_000_000 + (ts_ms + skew) * MS, "node": node, "type": type_, **kw})
    # m1 on a by n0 at t=0: n1 at 10 ms, n2 at 30 ms, n3 at 50 ms
    e("n0", 0, "publish_message", topic="a", msg_id="m1", size=100, seq=1)
    e("n1", 10, "deliver_message", topic="a", msg_id="m1", origin="n0", peer="n0", size=100)
    e("n2", 30, "deliver_message", topic="a", msg_id="m1", origin="n0", peer="n1", size=100)
    e("n3", 50, "deliver_message", topic="a", msg_id="m1", origin="n0", peer="n2", size=100)
    # m2 on a by n1 at t=100: n0 at 120 ms, n2 at 140 ms, n3 never
    e("n1", 100, "publish_message", topic="a", msg_id="m2", size=100, seq=1)
    e("n0", 120, "deliver_message", topic="a", msg_id="m2", origin="n1", peer="n1", size=100)
    e("n2", 140, "deliver_message", topic="a", msg_id="m2", origin="n1", peer="n0", size=100)
    # m3 on b by n2 at t=200: n1 at 205
    e("n2", 200, "publish_message", topic="b", msg_id="m3", size=100, seq=1)
    e("n1", 205, "deliver_message", topic="b", msg_id="m3", origin="n2", peer="n2", size=100)
    # 3 duplicates; traffic: 2 sends with 100 data bytes of 120, one control send of 8
    e("n2", 31, "duplicate_message", topic="a", msg_id="m1", peer="n3", size=100)
    e("n3", 51, "duplicate_message", topic="a", msg_id="m1", peer="n1", size=100)
    e("n3", 52, "duplicate_message", topic="a", msg_id="m1", peer="n2", size=100)
    e("n0", 1, "send_rpc", peer="n1", bytes=120, data_bytes=100, msgs=1, subs=0)
    e("n1", 11, "send_rpc", peer="n2", bytes=120, data_bytes=100, msgs=1, subs=0)
    e("n2", 2, "send_rpc", peer="n3", bytes=8, data_bytes=0, msgs=0, subs=1)
    # connections: n0-n1 up (both ends log it), n2-n3 up then down at n2
    e("n0", -5, "connect", peer="n1", outbound=True)
    e("n1", -5, "connect", peer="n0", outbound=False)
    e("n2", -4, "connect", peer="n3", outbound=True)
    e("n2", 500, "disconnect", peer="n3", reason="eof")
    # n0 samples its CPU and memory: 0.5 s of CPU over 1 s -> half a core; peak 120 MiB
    e("n0", 0, "resources", cpu_s=1.0, rss_bytes=100 * 2**20)
    e("n0", 1000, "resources", cpu_s=1.5, rss_bytes=120 * 2**20)
    for node, events in ev.items():
        with gzip.open(run_dir / "events" / f"{node}.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(x) + "\n" for x in events)
        # a torn last line, as a SIGKILL mid-write could leave, must not break the analysis
        with gzip.open(run_dir / "events" / f"{node}.jsonl.gz", "at") as f:
            f.write('{"ts": 5, "node": "' + node + '", "ty')


def compared_run(root: Path, name: str, metrics: dict, protocol: str = "floodsub", label: str | None = None,
                 **manifest_extra) -> Path:
    """A run directory with a manifest and analysis/metrics.json only, as `peerlab compare` reads it."""
    run = root / name
    (run / "analysis").mkdir(parents=True)
    manifest = {"run_id": name, "label": name if label is None else label,
                "scenario": {"topology": {"algorithm": "random"}},
                "plan": {"protocol": protocol, "nodes": [{"dial": ["a"]}, {"dial": []}]}, **manifest_extra}
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "analysis" / "metrics.json").write_text(json.dumps(metrics))
    return run
