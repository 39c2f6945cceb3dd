"""Metric jobs on a hand-built run whose answers are computed by hand."""
import gzip
import json
from pathlib import Path

import pytest

from analysis.job import analyse
from tests.support.runs import MS, write_run

pytestmark = pytest.mark.spark


def test_metrics_match_hand_computation(tmp_path, spark):
    write_run(tmp_path)
    m = analyse(tmp_path, spark)
    # expected receivers: m1 3, m2 3, m3 1 -> 7; delivered 3 + 2 + 1 = 6
    assert m["delivery_ratio"] == pytest.approx(6 / 7)
    assert m["messages"] == 3 and m["nodes"] == 4
    lat = m["latency_ms"]  # latencies 10, 30, 50, 20, 40, 5
    assert lat["mean"] == pytest.approx(155 / 6)
    assert lat["max"] == pytest.approx(50) and lat["min"] == pytest.approx(5)
    # the driver's peak memory is kept beside the stages' times: the JVM's resident peak (a JVM holds
    # well over 100 MiB) and its heap ceiling, this process's
    driver = json.loads((tmp_path / "analysis" / "timings.json").read_text())["driver"]
    assert driver["jvm_peak_rss_mib"] > 100 and driver["jvm_heap_max_mib"] > 256 and driver["python_peak_rss_mib"] > 50
    assert lat["p50"] == pytest.approx(25)  # exact percentile, linear interpolation
    cov = m["coverage_latency_ms"]
    # L50: m1 needs 2 of 3 -> 30; m2 2 of 3 -> 40; m3 1 of 1 -> 5  => mean 25
    assert cov["L50"] == pytest.approx(25)
    # L100: m1 50, m2 never, m3 5 => mean 27.5 over the 2 messages that got there
    assert cov["L100"] == pytest.approx(27.5)
    assert cov["messages_reaching"]["L100"] == 2
    # L15: ceil(0.45)=1st receiver: 10, 20, 5
    assert cov["L15"] == pytest.approx(35 / 3)
    assert m["duplicates_per_node"] == pytest.approx(3 / 4)
    assert m["bytes"] == {"data_sent": 200, "control_sent": 48, "total_sent": 248}
    assert m["shaping"] == {"mode": "transport", "latency_error_pct": 1.5, "bandwidth_error_pct": 3.0}
    # per topic: a has 2 messages, 6 expected, 5 delivered; b 1 of 1 -> ratios 5/6 and 1
    assert m["per_topic"]["topics"] == 2
    assert m["per_topic"]["delivery_ratio"]["min"] == pytest.approx(5 / 6)
    assert m["per_topic"]["delivery_ratio"]["max"] == 1.0
    # per subscriber: n0 1/1, n1 2/2, n2 2/2, n3 1/2 (missed m2)
    assert m["per_subscriber"]["subscribers"] == 4
    assert m["per_subscriber"]["delivery_ratio"]["min"] == pytest.approx(0.5)
    # bandwidth over the publishing window [T0, T0 + 1 s]: 248 bytes from 4 nodes in 1 s; the busiest
    # node-second is n0's or n1's 120 bytes
    bw = m["bandwidth"]
    assert bw["mean_mbit_per_node"] == pytest.approx(248 * 8 / 1e6 / 4)
    assert bw["data_mbit_per_node"] == pytest.approx(200 * 8 / 1e6 / 4)
    assert bw["peak_node_mbit"] == pytest.approx(120 * 8 / 1e6)
    assert m["control"]["bytes_by_type"] == {"data": 200, "ihave": 0, "iwant": 0, "idontwant": 0, "graft": 0,
                                             "prune": 0, "other": 48}
    # at the end of the publishing window (T0 + 1 s) n0, n1 hold one each; n2's closed at 500 ms
    assert m["connections"] == {"connects": 3, "disconnects": 1,
                                "open_at_window_end": {"mean": pytest.approx(2 / 4), "min": 0, "max": 1}}
    assert m["resources"]["nodes"] == 1
    assert m["resources"]["cpu_share_mean"] == pytest.approx(0.5)
    assert m["resources"]["rss_peak_mb_max"] == pytest.approx(120)
    assert "attack" not in m  # no attackers planned
    out = tmp_path / "analysis"
    assert json.loads((out / "metrics.json").read_text())["delivery_ratio"] == pytest.approx(6 / 7)
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3  # latency CDF, coverage, bandwidth
    for name in ("Per topic and per subscriber", "Traffic, connections and resources"):
        assert name in html
    tables = out / "tables"
    assert sorted(p.name for p in (tables / "events").iterdir() if p.is_dir()) == ["run=hand"]
    events = spark.read.parquet(str(tables / "events"))  # the logs once, as Parquet: every event, typed
    assert events.count() == m["events"] and dict(events.dtypes)["ts"] == "bigint"
    assert sorted(r["node"] for r in events.select("node").distinct().collect()) == [f"n{i}" for i in range(4)]
    for name in ("deliveries", "messages", "topics", "subscribers", "bandwidth", "resources"):
        assert (tables / name / "run=hand").is_dir(), name
    subscribers = spark.read.parquet(str(tables / "subscribers")).orderBy("receiver").collect()
    assert [(r["receiver"], r["expected"], r["delivered"]) for r in subscribers] == \
        [("n0", 1, 1), ("n1", 2, 2), ("n2", 2, 2), ("n3", 2, 1)]
    assert {r["run"] for r in subscribers} == {"hand"}


def test_clock_offsets_are_what_corrects_the_skewed_node(tmp_path, spark):
    """Without the manifest's offset, n3's receipts look 7 ms later."""
    write_run(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["clock"]["offsets_ns"] = {}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    m = analyse(tmp_path, spark)
    assert m["latency_ms"]["max"] == pytest.approx(57)  # n3's m1 receipt, uncorrected
    assert m["latency_ms"]["mean"] == pytest.approx((155 + 7) / 6)


def test_attack_impact_compares_victims_with_the_others(tmp_path, spark):
    """n3 becomes a topic-drop attacker on topic b next to n2: victims are topic b's messages and
    the receivers planned next to n3 (n2)."""
    write_run(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for node in manifest["plan"]["nodes"]:
        node["neighbours"] = {"n0": ["n1"], "n1": ["n0", "n2"], "n2": ["n1", "n3"], "n3": ["n2"]}[node["id"]]
    n3 = manifest["plan"]["nodes"][3]
    n3.update(role="attacker", behaviour={"behaviour": "topic-drop", "topic": "b"})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    m = analyse(tmp_path, spark)
    attack = m["attack"]
    assert attack["attackers"] == 1
    # without n3 as receiver: m1 -> n1, n2; m2 -> n0, n2; m3 -> n1: all delivered
    topics = attack["victim_topics"]
    assert topics["topics"] == ["b"]
    assert (topics["victims"]["expected"], topics["victims"]["delivered"]) == (1, 1)
    assert (topics["others"]["expected"], topics["others"]["delivered"]) == (4, 4)
    near = attack["attacker_neighbours"]
    assert near["nodes"] == 1  # n2
    assert (near["victims"]["expected"], near["victims"]["delivered"]) == (2, 2)
    assert near["victims"]["p50_ms"] == pytest.approx(35)  # n2 got m1 at 30 ms, m2 at 40 ms: halfway
    assert "Attack impact" in (tmp_path / "analysis" / "report.html").read_text()


def write_gossipsub_run(run_dir: Path, warmup: int | None) -> None:
    """4 messages by n0 to n1..n3 (20, 40, 60, 80 ms apart per receiver step), with control traffic,
    saves and duplicates; the first two are warm-up."""
    nodes = [{"id": f"n{i}", "subscriptions": ["t"]} for i in range(4)]
    scenario = {"name": "gs", "analysis": {"warmup_messages": warmup}}
    manifest = {"run_id": "gs", "scenario": scenario, "plan": {"protocol": "gossipsub", "nodes": nodes},
                "shaping": {"mode": "transport"}}
    (run_dir / "events").mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    ev = []

    def e(node, ts_ms, type_, **kw):
        ev.append({"ts": 1_000_000_000_000 + ts_ms * MS, "node": node, "type": type_, **kw})
    for k in range(4):  # message k published at k s; receiver i gets it after i * step ms
        step = 20 * (k + 1)
        e("n0", 1000 * k, "publish_message", topic="t", msg_id=f"m{k}", size=1000, seq=k + 1)
        for i in (1, 2, 3):
            e(f"n{i}", 1000 * k + i * step, "deliver_message", topic="t", msg_id=f"m{k}", origin="n0", peer="n0", size=1000)
    e("n1", 5, "send_rpc", peer="n2", bytes=1100, data_bytes=1000, msgs=1)
    e("n1", 6, "send_rpc", peer="n2", bytes=40, data_bytes=0, ihave=3, ihave_bytes=30, graft=1, graft_bytes=5)
    e("n2", 7, "send_rpc", peer="n1", bytes=25, data_bytes=0, iwant=2, iwant_bytes=20)
    e("n3", 8, "send_rpc", peer="n1", bytes=12, data_bytes=0, idontwant=1, idontwant_bytes=10)
    e("n1", 9, "idontwant_skip", peer="n3", msg_id="m0", size=1000)
    e("n2", 9, "stagger_skip", peer="n3", msg_id="m0", size=1000)
    e("n2", 9, "stagger_skip", peer="n1", msg_id="m1", size=1000)
    e("n3", 70, "duplicate_message", topic="t", msg_id="m0", peer="n2", size=1000)
    e("n3", 75, "reject_message", topic="t", msg_id="x", peer="n2", reason="validation: reject")
    e("n3", 76, "penalty", peer="n2", reason="broken promise")
    with gzip.open(run_dir / "events" / "all.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(x) + "\n" for x in ev)


@pytest.mark.parametrize("warmup, l100", [(None, (240 + 180) / 2), (0, (60 + 120 + 180 + 240) / 4)])
def test_gossipsub_extras_skip_the_warmup_and_count_control_and_saves(tmp_path, spark, warmup, l100):
    write_gossipsub_run(tmp_path, warmup)
    m = analyse(tmp_path, spark)
    g = m["protocol"]
    assert g["warmup_messages"] == (2 if warmup is None else 0)  # the seed's default is 2
    assert g["coverage_latency_ms"]["L100"] == pytest.approx(l100)
    if warmup is None:  # L100 of m2 and m3: 180 and 240 -> sample deviation 42.43
        assert g["coverage_latency_ms"]["deviation"]["L100"] == pytest.approx(42.426, rel=1e-3)
    assert m["coverage_latency_ms"]["L100"] == pytest.approx(600 / 4)  # the common figure keeps all
    assert g["control"] == {"ihave": 3, "iwant": 2, "idontwant": 1, "graft": 1, "prune": 0}
    assert g["bytes_sent_by_type"] == {"data": 1000, "ihave": 30, "iwant": 20, "idontwant": 10, "graft": 5,
                                       "prune": 0, "other": 1177 - 1065}
    assert g["idontwant_saves"] == {"count": 3, "bytes": 3000}
    assert g["stagger_saves"] == {"count": 2, "bytes": 2000}
    assert g["duplicates"] == {"count": 1, "bytes": 1000}
    assert (g["penalties"], g["rejected"]) == (1, 1)
    assert (tmp_path / "analysis" / "tables" / "gossipsub_messages").is_dir()
    assert "Protocol: gossipsub" in (tmp_path / "analysis" / "report.html").read_text()


def test_a_publish_its_implementation_refused_is_counted_apart_and_expected_nowhere(tmp_path, spark):
    """rust-libp2p and js-libp2p refuse a publish while they know no peer subscribed to the topic (a
    node just restarted): the message never leaves its node. It is not a delivery lost by the
    network: delivery stays 1.0 over the four messages sent, the refusal is counted and shown."""
    write_gossipsub_run(tmp_path, 0)
    at = 1_000_000_000_000 + 5000 * MS
    refusal = [{"ts": at, "node": "n0", "type": "publish_message", "topic": "t", "msg_id": "m4", "size": 1000, "seq": 5},
               {"ts": at + MS, "node": "n0", "type": "publish_refused", "topic": "t", "msg_id": "m4",
                "reason": "NoPeersSubscribedToTopic"}]
    with gzip.open(tmp_path / "events" / "n0.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(x) + "\n" for x in refusal)
    m = analyse(tmp_path, spark)
    assert (m["messages"], m["delivery_ratio"]) == (4, 1.0)
    assert m["publishes_refused"] == {"count": 1, "first": [{"msg_id": "m4", "node": "n0",
                                                              "reason": "NoPeersSubscribedToTopic"}]}
    assert "refused by the implementation" in (tmp_path / "analysis" / "report.html").read_text()


def test_accounting_and_delivery_among_nodes_up(tmp_path, spark):
    """The hand-built run with a timeline: every node armed at T0, n3 SIGKILLed at 60 ms (the
    manifest says so; its log just ends), the others stop at 1 s."""
    write_run(tmp_path)
    base = 1_000_000_000_000
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    schedule = {"n0": [[0.0, "a", 100], [0.5, "a", 100]], "n1": [[0.1, "a", 100]], "n2": [[0.2, "b", 100]],
                "n3": [[0.3, "a", 100]]}
    for node in manifest["plan"]["nodes"]:
        node["schedule"] = schedule[node["id"]]
    manifest.update(t0_ns=base, faults_executed=[{"at": 0.06, "action": "kill", "node": "n3", "t_ns": base + 60 * MS}],
                    scenario={"name": "hand", "analysis": {"dissemination_window": 0.02}})
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    for i in range(4):
        marks = [{"ts": base - MS, "node": f"n{i}", "type": "t0", "t0": base}]
        if i != 3:
            marks.append({"ts": base + 1000 * MS, "node": f"n{i}", "type": "stop", "reason": "run finished"})
        with gzip.open(tmp_path / "events" / f"n{i}.jsonl.gz", "at") as f:
            f.write("\n" + "".join(json.dumps(x) + "\n" for x in marks))
    m = analyse(tmp_path, spark)
    assert m["delivery_ratio"] == pytest.approx(6 / 7)  # raw: n3 never got m2
    assert m["delivery_ratio_up"] == 1.0                 # n3 was dead when m2 went out
    # planned 5: m1, m2, m3 logged; n3's at 300 ms: down; n0's at 500 ms: up and never logged
    assert m["accounting"] == {"published_planned": 5, "published_logged": 3, "publisher_down": 1,
                               "unaccounted": 1}


def test_a_message_its_publisher_sent_before_it_was_up_is_not_counted_among_nodes_up(spark):
    """delivery_ratio_up counts a message only where its publisher was up when it published it (a
    restarted node not yet connected is not), and each receiver up through its window."""
    from analysis import faults
    from analysis.spark import local_frame
    S = 1_000_000_000
    up = faults.intervals_frame(spark, {"n0": [(0, 30 * S)], "n1": [(0, 30 * S)], "n4": [(0, 6 * S), (9 * S, 30 * S)]})
    pubs = local_frame(spark, [("m1", "n0", 1 * S), ("m2", "n4", 8 * S), ("m3", "n4", 10 * S)],
                       "msg_id string, origin string, t_pub long")
    dl = local_frame(spark, [("m1", "n1", 1 * S, 2 * S), ("m1", "n4", 1 * S, 2 * S),
                             ("m2", "n0", 8 * S, None), ("m2", "n1", 8 * S, None),
                             ("m3", "n0", 10 * S, 11 * S), ("m3", "n1", 10 * S, None)],
                     "msg_id string, receiver string, t_pub long, t_recv long")
    kept = faults.deliveries_up(dl, up, 2 * S, pubs)
    assert sorted((r["msg_id"], r["receiver"]) for r in kept.collect()) == [
        ("m1", "n1"), ("m1", "n4"), ("m3", "n0"), ("m3", "n1")]  # m2: n4 was not up when it published
    assert faults.ratio(kept) == 0.75


def test_every_percentile_follows_one_rule(spark):
    """Whole-run percentiles (`quantiles`, two passes), per-group ones (`group_quantile`) and those of
    small tables at the driver (`small_quantiles`) give the same exact, linearly interpolated values as the standard library's inclusive method (numpy's
    default), on data where nearest-rank would differ."""
    import random
    import statistics

    from analysis.metrics import group_quantile, quantiles, small_quantiles

    rng = random.Random(3)
    values = [rng.expovariate(1 / 40) for _ in range(1001)] + [None] * 7
    frame = spark.createDataFrame([(v,) for v in values], "x double")
    got = [v for v in values if v is not None]
    cuts = statistics.quantiles(got, n=100, method="inclusive")  # cuts[k-1] = k-th percentile
    probs = (0.1, 0.5, 0.9, 0.99)
    expected = [cuts[round(p * 100) - 1] for p in probs]
    assert quantiles(frame, "x", probs) == pytest.approx(expected, rel=1e-12)
    grouped = frame.groupBy().agg(*[group_quantile("x", p).alias(str(p)) for p in probs]).first()
    assert [grouped[str(p)] for p in probs] == pytest.approx(expected, rel=1e-12)
    assert small_quantiles(values, probs) == pytest.approx(expected, rel=1e-12)  # the per-topic spreads
    assert quantiles(frame.where("x is null"), "x", probs) is None and small_quantiles([None], probs) is None


def test_own_side_share_leaves_out_messages_that_race_the_heal(spark):
    """A cut at 1 s healed at 11 s, sides {a, b} and {c}: m1 reached b during the cut, m3 never did,
    and m2, published 30 ms before the heal, reached b 10 ms after it: it raced the heal and is left
    out of the own-side share (1 of 2), not counted as lost (1 of 3)."""
    from analysis.faults import partitions

    s = 1_000_000_000
    manifest = {"t0_ns": 0, "faults_executed": [
        {"action": "partition", "t_ns": 1 * s, "groups": [["a", "b"], ["c"]]}, {"action": "heal", "t_ns": 11 * s}]}
    pubs = spark.createDataFrame([("m1", "a", 5 * s), ("m2", "a", 11 * s - 30_000_000), ("m3", "a", 8 * s)],
                                 "msg_id string, origin string, t_pub long")
    dl_up = spark.createDataFrame([
        ("m1", "b", 5 * s, 5 * s + 50_000_000), ("m1", "c", 5 * s, 11 * s + 200_000_000),
        ("m2", "b", 11 * s - 30_000_000, 11 * s + 10_000_000), ("m2", "c", 11 * s - 30_000_000, None),
        ("m3", "b", 8 * s, None), ("m3", "c", 8 * s, None)],
        "msg_id string, receiver string, t_pub long, t_recv long")
    (cut,) = partitions(manifest, pubs, dl_up)
    assert cut["messages_during"] == 3
    assert cut["own_side_delivery_before_heal"] == 0.5
    assert (cut["across_delivered_before_heal"], cut["across_delivered_after_heal"], cut["across_expected"]) == (0, 1, 3)


def test_a_partition_lasts_until_its_heal_begins(spark):
    """A heal issued at 11 s and done at 11.4 s (it lifts the cut port by port): m1 reached c at
    11.2 s, while the heal was lifting the cut. That is after the heal, not a crossing of the partition;
    the heal's time in the figures is when it began."""
    from analysis.faults import partitions

    s = 1_000_000_000
    manifest = {"t0_ns": 0, "faults_executed": [
        {"action": "partition", "t_ns": 1 * s, "issued_ns": s - 80_000_000, "groups": [["a", "b"], ["c"]]},
        {"action": "heal", "t_ns": 11 * s + 400_000_000, "issued_ns": 11 * s}]}
    pubs = spark.createDataFrame([("m1", "a", 5 * s)], "msg_id string, origin string, t_pub long")
    dl_up = spark.createDataFrame([("m1", "b", 5 * s, 5 * s + 50_000_000), ("m1", "c", 5 * s, 11 * s + 200_000_000)],
                                  "msg_id string, receiver string, t_pub long, t_recv long")
    (cut,) = partitions(manifest, pubs, dl_up)
    assert (cut["across_delivered_before_heal"], cut["across_delivered_after_heal"]) == (0, 1)
    assert cut["heal_s"] == 11.0 and cut["across_caught_up_s"] == 0.2


@pytest.mark.parametrize("warmup", [None, 0])
def test_the_gossipsub_interop_view_restates_their_per_message_analysis(tmp_path, spark, warmup):
    """gossipsub-interop's analyze_message_deliveries.py on the same events: time zero at a message's
    first delivery (n1's, one step after publication), time to disseminate to the last (2 steps), p50
    at index len // 2 of the sorted deliveries (1 step), duplicates over the nodes, reach over the
    nodes less the publisher; the warm-up messages skipped as their --skip does; their four plots
    (the fourth, by region, where nodes were placed in regions)."""
    write_gossipsub_run(tmp_path, warmup)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for node, region in zip(manifest["plan"]["nodes"], ["europe", "europe", "na_east", "australia"]):
        node["placement"] = {"region": region}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    d = analyse(tmp_path, spark)["protocol"]["dissemination"]
    kept = range(2, 4) if warmup is None else range(4)
    assert d["skipped"] == 4 - len(kept)
    assert [r["msg_id"] for r in d["messages"]] == [f"m{k}" for k in kept]
    for r, k in zip(d["messages"], kept):
        step = 0.020 * (k + 1)
        assert r["time_to_disseminate_s"] == pytest.approx(2 * step)
        assert r["p50_s"] == pytest.approx(step)
        assert r["avg_duplicates"] == (0.25 if k == 0 else 0.0)  # n3's one duplicate of m0, over 4 nodes
        assert r["reach"] == 1.0
    report = (tmp_path / "analysis" / "report.html").read_text()
    assert "gossipsub-interop view" in report
    for plot in ("time to disseminate", "duplicates", "delivery CDF", "delivery by region"):
        assert f'alt="gossipsub-interop: {plot}"' in report
