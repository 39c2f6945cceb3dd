"""The netem path, on a kernel that has sch_netem: latency buckets, the rate with netem leaves, the pod
layout's ifb download cap, degrade (delay, loss, jitter) in netem qdiscs, and a scenario run end to end in
netem mode with a partition and a degrade.

Marked `netem`: on a kernel without sch_netem (this project's CI machines) `make test-netem` runs
them in a Debian guest under QEMU (orchestrator/vm), where they must pass."""
from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from pyroute2 import NetNS

from orchestrator.shaping import ops
from orchestrator.shaping import tc as shaping
from tests.support import links
from tests.support.cli import ROOT

pytestmark = [pytest.mark.netem, pytest.mark.emulation]

RATE = 50_000_000


def rtt_ok(measured: float, configured: float, base: float) -> bool:
    """The issue's bar for netem's latency: the round trip the shaping adds to the path's own (`base`)
    within 3% + 1 ms of the configured one. Both are minimums (`min_rtt_ms`)."""
    return abs(measured - base - configured) <= 0.03 * configured + 1.0


def min_rtt_ms(a: str, addr: str = links.B_ADDR, count: int = 7) -> float:
    """The least of `count` round trips: a busy host adds to some, never takes from any, so the least
    is the path's own plus the shaping (a median inflated on the base alone would fail from below).
    Unshaped: about 1 ms in the guest, whose CPU is emulated (0.05 ms on a host)."""
    rtts, _ = links.pings(a, addr, count)
    assert rtts, f"no answer from {addr}"
    return min(rtts)


def shape(ns_name: str, *buckets: tuple[float, tuple[str, ...]], up: int = RATE) -> ops.Egress:
    """The node's uplink with netem buckets, (one-way ms, destinations) each."""
    egress = ops.Egress("eth0", up, tuple(buckets))
    with NetNS(ns_name, flags=0) as ns:
        shaping.apply(ns, [egress])
    return egress


def degrade_egress(node: ops.Egress, delay_ms: float, loss: float, jitter_ms: float = 0.0) -> ops.DegradeEgress:
    return ops.DegradeEgress("eth0", node.up_bps, tuple(d for d, _ in node.buckets), 0.0, 0.0, delay_ms, loss,
                             jitter_ms)


def wire_mbit(src: str, dst: str, ifname: str = "eth0", sent_in: str | None = None) -> tuple[float, float]:
    """A TCP stream from namespace src to dst's 10.9.0.2: (goodput, rate in frames as the shaper
    counts them), Mbit/s. Frames are read from the shaping link class (`sent_in`'s `ifname`, default
    src's eth0)."""
    def sent() -> int:
        with NetNS(sent_in or src, flags=0) as ns:
            return shaping.link_sent(ns, ifname)["bytes"]

    before = sent()
    n, span, total = links.stream(src, dst, links.B_ADDR, skip=1.0)  # past slow start over tens of ms
    frames_per_payload = (sent() - before) / total
    goodput = n * 8 / span / 1e6
    return goodput, goodput * frames_per_payload


@pytest.fixture
def pair():
    with links.veth_pair("plfffffe-n") as (a, b):
        links.address(a, b, "10.9.0.3")
        yield a, b


def test_buckets_delay_each_destination_by_its_latency(pair):
    a, b = pair
    base = min_rtt_ms(a)
    shape(a, (30.0, (links.B_ADDR,)))            # 10.9.0.3 is in no bucket: class 1:2
    shape(b, (40.0, (links.A_ADDR,)))
    to_b = min_rtt_ms(a)
    unmatched = min_rtt_ms(a, "10.9.0.3")     # 0 ms out, 40 ms back
    print(f"RTT a->b {to_b:.2f} ms (configured 70), a->10.9.0.3 {unmatched:.2f} ms (configured 40), "
          f"unshaped {base:.2f} ms")
    assert rtt_ok(to_b, 70.0, base), (to_b, base)
    assert rtt_ok(unmatched, 40.0, base), (unmatched, base)


def test_rate_with_netem_leaves_is_the_configured_rate_in_frames(pair):
    a, b = pair
    shape(a, (10.0, (links.B_ADDR,)))
    shape(b, (10.0, (links.A_ADDR,)))
    rounds = [wire_mbit(a, b) for _ in range(3)]
    print("goodput, frames (Mbit/s):", rounds)
    goodput, frames = max(rounds, key=lambda r: r[1])
    # the lower bound on the best round: a busy host slows a stream, never speeds it up; the upper on
    # the least: a receiver stalled as its count began counts what queued meanwhile, too much
    assert frames >= 0.97 * 50.0 and min(f for _, f in rounds) <= 1.03 * 50.0, rounds
    assert goodput < frames  # headers are part of the rate, not of the payload


def test_pod_layout_ifb_cap_and_degrade_in_netem(pair):
    """The kubernetes layout: b's incoming packets pass an ifb carrying its download tree. With
    netem buckets on b's egress, the cap holds; degrade adds netem delay, loss and jitter on both halves
    of b's link and restoring takes them away."""
    a, b = pair
    base = min_rtt_ms(a)
    shape(a, (25.0, (links.B_ADDR,)))
    node_b = shape(b, (25.0, (links.A_ADDR,)))
    with NetNS(b, flags=0) as ns:
        shaping.apply(ns, [ops.RedirectIngress("eth0", "ifb0"), ops.Download("ifb0", 20_000_000)])
    rounds = [wire_mbit(a, b, "ifb0", sent_in=b) for _ in range(3)]
    goodput, frames = max(rounds, key=lambda r: r[1])
    print(f"download cap 20 Mbit/s: {frames:.2f} in frames, {goodput:.2f} of payload (best of 3)")
    # as in the test above: the lower bound on the best round, the upper on the least. The lower is
    # 4%, not 3%: every packet here also crosses the ifb, whose work the guest's emulated CPU does late
    # (19.29 to 19.62 Mbit/s seen in the guest, a CI run's best of three 19.36); a cap set on the
    # payload, its headers left out, would carry 20 x 1448 / 1514 = 19.13 in frames, below the bound
    assert frames >= 0.96 * 20.0 and min(f for _, f in rounds) <= 1.03 * 20.0, rounds
    capped = min_rtt_ms(a, count=11)
    print(f"through the ifb: RTT {capped:.2f} ms (configured 50, unshaped {base:.2f})")
    assert rtt_ok(capped, 50.0, base), (capped, base)

    with NetNS(b, flags=0) as ns:
        shaping.apply(ns, [degrade_egress(node_b, 40.0, 0.0),
                           ops.DegradeIngress("ifb0", 20_000_000, 40.0, 0.0)])
    degraded = min_rtt_ms(a, count=11)
    print(f"degraded by 40 ms each way: RTT {degraded:.2f} ms (configured 130)")
    assert rtt_ok(degraded, 130.0, base), (degraded, base)

    with NetNS(b, flags=0) as ns:
        shaping.apply(ns, [degrade_egress(node_b, 0.0, 0.5)])
    rtts, lost = links.pings(a, links.B_ADDR, count=40, interval=0.05)
    print(f"loss 0.5 on b's sends: {lost}/40 lost")
    assert 8 <= lost <= 32, lost  # binomial(40, 0.5): outside this in less than 1 run in 10^4

    # the fault timeline's jitter, each half of b's link on its own: netem never delivers early, nor
    # does a busy host, so only jitter takes a round trip 10 ms below the configured one; with +-20 ms
    # P = 1/4 for each ping, none of 100 in 10^12 runs
    with NetNS(b, flags=0) as ns:  # what b sends: its buckets' 25 ms +- 20 (what it receives: as planned)
        shaping.apply(ns, [degrade_egress(node_b, 0.0, 0.0, 20.0), ops.DegradeIngress("ifb0", 20_000_000, 0.0, 0.0)])
    rtts, lost = links.pings(a, links.B_ADDR, count=100, interval=0.02)
    print(f"jitter +-20 ms on b's sends: RTT {min(rtts):.1f} to {max(rtts):.1f} ms (configured 50 +- 20)")
    assert lost == 0 and min(rtts) < base + 40.0, (rtts, base)
    with NetNS(b, flags=0) as ns:  # what b receives: the ifb's netem, 20 ms added +- 20 (netem draws around it)
        shaping.apply(ns, [degrade_egress(node_b, 0.0, 0.0),
                           ops.DegradeIngress("ifb0", 20_000_000, 20.0, 0.0, 20.0)])
    rtts, lost = links.pings(a, links.B_ADDR, count=100, interval=0.02)
    print(f"20 +- 20 ms on what b receives: RTT {min(rtts):.1f} to {max(rtts):.1f} ms (configured 70 +- 20)")
    assert lost == 0 and min(rtts) < base + 60.0, (rtts, base)

    with NetNS(b, flags=0) as ns:
        shaping.apply(ns, [degrade_egress(node_b, 0.0, 0.0),
                           ops.DegradeIngress("ifb0", 20_000_000, 0.0, 0.0)])
        shaping.apply(ns, [ops.DegradeIngress("ifb0", 20_000_000, 0.0, 0.0)])  # restoring twice is harmless
        tree = shaping.describe(ns, "ifb0")
    assert not any("netem" in line for line in tree), tree
    rtts, lost = links.pings(a, links.B_ADDR, count=10, interval=0.05)
    assert lost == 0 and rtt_ok(min(rtts), 50.0, base), (rtts, base)


def events_of(run_dir: Path, node: str) -> list[dict]:
    with gzip.open(run_dir / "events" / f"{node}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


SCENARIO = """name: netem-guest
seed: 4
nodes: {count: 6}
protocol: floodsub
topology: {algorithm: complete}
network: {latency: {model: constant, one_way: 50ms}, bandwidth_up: 20mbit, bandwidth_down: 20mbit, shaping: netem}
topics: {count: 1}
workload: {publishers: 6, rate: 3/s, message_size: 1KB, warmup: 2s, duration: 60s, drain: 4s}
calibration: {pairs: 3, throughput_nodes: 1}
# long windows: in the guest (15-20 times slower CPU, loaded by this run) a fault took 3-14 s to take
# effect (the verdict says so: fault timeline), and the test counts what was published between a
# fault in place and the next (the cut and the heal; the restore and the end of publishing)
faults:
  - {at: 4s, action: partition, groups: [[n0, n1, n2]], duration: 24s}
  - {at: 34s, action: degrade, nodes: [n5], delay: 150ms, loss: 0.02, duration: 8s}
"""


def test_a_scenario_runs_in_netem_mode_end_to_end(tmp_path: Path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO + f"output: {{store: 'file://{tmp_path}/runs'}}\n")
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(scenario), "--no-report"],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    print(result.stderr)
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["shaping"]["mode"] == "netem"
    cal = manifest["calibration"]
    print("calibration:", json.dumps({k: cal[k] for k in ("latency_error_pct", "bandwidth_error_pct")}),
          [(r["configured_ms"], r["measured_ms"]) for r in cal["rtt"]],
          [(r["measured_mbit"], r["goodput_mbit"]) for r in cal["throughput"]])
    # the kernel's part (netem) is held to 3% + 1 ms by the ping tests above; the nodes' own probes add
    # their processing, 15-20x slower in the guest's emulated CPU than on a host and slower still on a
    # loaded CI machine (+8 to +20 ms seen). What this run must show is that netem applied each pair's
    # delay once per direction: not missing (about +15 ms) and not doubled (about +115 ms). The rate is
    # 20 Mbit/s, not the default 50: a node's probe in the guest's emulated CPU reached 49.8-50.0 Mbit/s
    # of 50 in most runs but 41.3 in one, alone on the machine (the emulated CPU is that close to its limit),
    # where 20 leaves it room.
    assert all(-1.0 <= r["measured_ms"] - r["configured_ms"] <= 0.5 * r["configured_ms"] for r in cal["rtt"]), cal
    # the rate: never above the plan's (that would be a shaper that missed the link: the guest's
    # CPU alone reaches about 50 Mbit/s), and below it only by what the guest's emulated CPU loses on a
    # loaded machine (19.2 of 20 seen in CI, in a run whose verdict said UNFAITHFUL); a wrong unit or
    # a rate applied twice would be far below. measured_mbit is the best round: the upper bound is on
    # the least (a probe's receiver stalled as its count began counts too much)
    assert all(0.85 <= r["measured_mbit"] / r["configured_mbit"] and min(r["rounds_mbit"]) / r["configured_mbit"]
               <= 1.03 for r in cal["throughput"]), cal
    assert [f["action"] for f in manifest["faults_executed"]] == ["partition", "heal", "degrade", "restore"]
    at = {f["action"]: f["t_ns"] for f in manifest["faults_executed"]}
    # the heal opens the links one by one (about 0.3 s in the guest), and what the cut held back
    # crosses as soon as its link is open: the partition lasts until the heal begins (faults.record)
    healing = next(f["issued_ns"] for f in manifest["faults_executed"] if f["action"] == "heal")

    nodes = [f"n{i}" for i in range(6)]
    side = {n: n in ("n0", "n1", "n2") for n in nodes}
    events = {n: events_of(run_dir, n) for n in nodes}
    published = {e["msg_id"]: (n, e["ts"]) for n in nodes for e in events[n] if e["type"] == "publish_message"}
    delivered = {(n, e["msg_id"]): e["ts"] for n in nodes for e in events[n] if e["type"] == "deliver_message"}
    # during the cut (from 0.5 s after it): nothing crossed before the heal began, each side got its own
    during = [(m, src) for m, (src, ts) in published.items() if at["partition"] + 5e8 < ts < healing]
    assert len(during) >= 8
    across = [(m, n) for m, src in during for n in nodes if side[n] != side[src]
              and delivered.get((n, m), float("inf")) < healing]
    own_missing = [(m, n) for m, src in during for n in nodes if side[n] == side[src] and n != src
                   and (n, m) not in delivered]
    assert not across and not own_missing, (across, own_missing)
    # after the heal and before the degrade, every message reached every node
    calm = [m for m, (src, ts) in published.items() if at["heal"] + 2e9 < ts < at["degrade"]]
    assert calm and all((n, m) in delivered for m in calm for n in nodes if n != published[m][0])
    # while n5 is degraded (150 ms on each half of its link, by netem), what it receives is late
    late = [(delivered[("n5", m)] - published[m][1]) / 1e6 for m, (src, ts) in published.items()
            if src != "n5" and at["degrade"] + 5e8 < ts < at["restore"] - 1e9 and ("n5", m) in delivered]
    normal = [(delivered[("n5", m)] - published[m][1]) / 1e6 for m, (src, ts) in published.items()
              if src != "n5" and ts > at["restore"] + 1e9 and ("n5", m) in delivered]
    assert late and normal
    print(f"to n5 while degraded: min {min(late):.1f} ms; after: median {statistics.median(normal):.1f} ms, "
          f"max {max(normal):.1f} ms")
    assert min(late) >= 150 + 50 - 2
    # restored: a degradation left in place would delay every delivery by 150 ms or more; the median, not
    # the maximum, because the guest's emulated CPU, on a loaded machine, may hold one back for a moment
    assert statistics.median(normal) < 150
