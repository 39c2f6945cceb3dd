"""The DHT protocols as real processes on the local backend (namespaces, tc, the analysis):
PulsarCast with everyone publishing delivers everything to its subscribers and sends about a third
of floodsub's bytes on the same stream; ScoutSubs' reliable variants (base and redirect) deliver
every matching event to the subscribers left after two are killed (scenarios/smartpubsub-fault.yaml);
FastDelivery delivers every matching event exactly once, in at most two hops
(scenarios/smartpubsub-fastdelivery.yaml). The SmartPubSub scenarios publish their 60 events at twice
the shipped rate for half as long (`TWICE_AS_FAST`); the rest is as shipped."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.job import analyse
from tests.support.cli import ROOT

pytestmark = [pytest.mark.emulation, pytest.mark.spark, pytest.mark.slow]

SMALL_STREAM = ["--set", "nodes.count=30", "--set", "topics.count=6", "--set", "workload.publishers=10",
                "--set", "workload.rate=16/s", "--set", "workload.duration=7.5s", "--set", "workload.warmup=12s",
                "--set", "calibration.enabled=false"]


TWICE_AS_FAST = ["--set", "workload.rate=6/s", "--set", "workload.duration=10s", "--set", "calibration.enabled=false"]


def run(tmp_path: Path, scenario: str, *overrides: str) -> Path:
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", scenario, "--no-report",
                             "--set", f"output.store=file://{tmp_path}/runs", *overrides],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip().splitlines()[-1])


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for f in (run_dir / "events").iterdir() for line in gzip.open(f, "rt")]


# Under CPU contention its delivery came 0.953-0.973 in three suite runs (2026-11-27/28) and 0.970-0.991
# in 3 of 8 runs beside the unit tests: two nodes that dial each other at once keep one connection, and a lookup's RPC on the
# other was lost and waited its 5 s rpc_timeout, holding a topic's name back past the warm-up. Kademlia
# now sends such a request again on the connection that stays (tests/unit/test_kademlia_rules.py).
def test_pulsarcast_everyone_publishes_and_costs_a_fraction_of_floodsub(tmp_path: Path, spark):
    pulsar_dir = run(tmp_path, "scenarios/pulsarcast-everyone.yaml", *SMALL_STREAM)
    pulsar = analyse(pulsar_dir, spark)
    # the bytes are compared, not the timing: FloodSub's run stays undilated (past the CPU's faithful
    # share, peerlab would dilate it by itself and double its length), and its warm-up is 2 s (no DHT to
    # fill: its peers are connected before T0, and it sends nothing before its first publish)
    floodsub_stream = [a.replace("workload.warmup=12s", "workload.warmup=2s") for a in SMALL_STREAM]
    flood = analyse(run(tmp_path, "scenarios/pulsarcast-floodsub.yaml", *floodsub_stream, "--dilate", "1"), spark)
    ratio = pulsar["bytes"]["total_sent"] / flood["bytes"]["total_sent"]
    print("pulsarcast:", pulsar["delivery_ratio"], pulsar["bytes"], json.dumps(pulsar["protocol"]["dht"]))
    print("floodsub:", flood["delivery_ratio"], flood["bytes"], f"bytes ratio {ratio:.3f}")
    assert pulsar["messages"] == flood["messages"] == 120  # the same stream
    assert pulsar["delivery_ratio"] >= 0.99
    assert pulsar["protocol"]["subscribers"]["duplicated"] == 0  # a tree sends each event once per edge
    # every subscriber resolved its topics' names in the DHT and joined their trees (a get made
    # before the author stored the name finds nothing and is retried)
    plan = json.loads((pulsar_dir / "manifest.json").read_text())["plan"]
    joined = {(e["node"], e["topic"]) for e in events(pulsar_dir) if e["type"] == "graft"}
    wanted = {(n["id"], t) for n in plan["nodes"] for t in n["subscriptions"] if t not in n["authors"]}
    assert wanted and wanted <= joined
    assert 0 < pulsar["protocol"]["dht"]["values_found"] <= pulsar["protocol"]["dht"]["value_gets"]
    assert ratio < 0.7


@pytest.mark.parametrize("redirect", [False, True], ids=["base-reliable", "redirect-reliable"])
def test_scoutsubs_reliable_delivers_everything_after_two_subscribers_die(tmp_path: Path, spark, redirect):
    run_dir = run(tmp_path, "scenarios/smartpubsub-fault.yaml", *TWICE_AS_FAST,
                  "--set", f"protocol.params.redirect={str(redirect).lower()}")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert sorted(f["node"] for f in manifest["faults_executed"] if f["action"] == "kill") == ["n11", "n38"]
    metrics = analyse(run_dir, spark)
    print("scoutsubs fault, redirect" if redirect else "scoutsubs fault, base", "reliable:", metrics["delivery_ratio"], metrics["delivery_ratio_up"], metrics["latency_ms"],
          json.dumps(metrics["protocol"]["subscribers"]))
    assert metrics["messages"] == 60
    assert metrics["delivery_ratio_up"] == 1.0          # every matching event, every surviving subscriber
    assert metrics["delivery_ratio"] < 1.0              # the two dead subscribers are still counted here
    subs = metrics["protocol"]["subscribers"]
    assert subs["missing"] == subs["expected"] - subs["delivered"] > 0
    sub_latency = metrics["protocol"]["subscription_latency_ms"]
    assert sub_latency["subscriptions"] == 48 and sub_latency["p50_ms"] > 0  # every planned filter acked


def test_fastdelivery_delivers_every_event_once_in_at_most_two_hops(tmp_path: Path, spark):
    run_dir = run(tmp_path, "scenarios/smartpubsub-fastdelivery.yaml", *TWICE_AS_FAST)
    metrics = analyse(run_dir, spark)
    print("fastdelivery:", metrics["delivery_ratio"], metrics["latency_ms"], json.dumps(metrics["protocol"]))
    assert metrics["messages"] == 60
    assert metrics["delivery_ratio"] == 1.0
    subs = metrics["protocol"]["subscribers"]
    assert subs["duplicated"] == 0 and subs["missing"] == 0 and subs["delivered"] == subs["expected"] > 0
    assert metrics["protocol"]["subscription_latency_ms"]["subscriptions"] == 48  # every filter joined a group
    logged = events(run_dir)
    helpers = {e["peer"] for e in logged if e["type"] == "helper" and e["reason"] == "recruited"}
    assert helpers  # crowded regions recruited helpers
    deliveries = [e for e in logged if e["type"] == "deliver_message"]
    assert deliveries and all(e["peer"] == e["origin"] or e["peer"] in helpers for e in deliveries)
