"""The fidelity rule: figures in, verdict and reasons out (orchestrator/fidelity/rule.py), from
figures made of deterministic samples (orchestrator/fidelity/figures.py)."""
from orchestrator.fidelity import figures, rule
from orchestrator.fidelity.host import Sample
from orchestrator.fidelity.text import phase_line


def _samples(n, busy=0.5, runnable=0.5, psi=5.0, steal=0.0):
    return [Sample(at=float(i), busy=busy, steal=steal, runnable_per_core=runnable, psi_some_pct=psi,
                   psi_some_avg10=psi) for i in range(n)]


def _lag(p99, nodes=3, late=None):
    """`nodes` windows of 100 ticks: n1's p99 is `p99`; `late` of all the ticks fall in 20-50 ms (by
    default: n1's two slowest, when its p99 is over 20 ms)."""
    if late is None:
        late = 2 if p99 > 20 else 0
    windows = {}
    for i in range(nodes):
        hist = [90, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # EDGES_MS (1, 2, 5, 10, 20, ...) and above
        if i == 1:
            hist[0] -= late
            hist[5] += late
        windows[f"n{i}"] = {"tick_ms": 50.0, "samples": 100, "next": 100, "p50_ms": 0.3,
                            "p99_ms": p99 if i == 1 else 1.0, "max_ms": 2 * p99, "hist": hist}
    return windows


def _probes(measured, configured=100.0):
    return [{"a": "n0", "b": f"n{i + 1}", "configured_ms": configured, "measured_ms": m} for i, m in enumerate(measured)]


def _phase(samples=None, lag=None, probes=None, late=None, foreign=()):
    fig = {"host": figures.host_figures(samples or []), "loop_lag": figures.lag_figures(lag or {}, list(foreign)),
           "probes": figures.probe_figures(probes or [])}
    if late is not None:
        fig["delay_line"] = figures.delay_line_figures(late)
    return rule.judge_phase(fig)


QUIET = dict(samples=_samples(20), lag=_lag(3.0), probes=_probes([100.5, 101.0, 99.8]))


def test_a_quiet_phase_is_faithful():
    phase = _phase(**QUIET)
    assert phase["verdict"] == rule.FAITHFUL and phase["reasons"] == []
    assert phase["host"]["cpu_busy_pct"] == {"p50": 50.0, "max": 50.0, "mean": 50.0}
    assert phase_line(phase).startswith("faithful: CPU busy p50 50%")


def test_each_reason_alone():
    # one node's p99 alone is no reason: its 2 late ticks are under 5% of the 300
    assert _phase(**{**QUIET, "lag": _lag(25.0)})["verdict"] == rule.FAITHFUL
    assert _phase(**{**QUIET, "lag": _lag(25.0, late=15)})["verdict"] == rule.FAITHFUL  # 5.0%: not above
    lag = _phase(**{**QUIET, "lag": _lag(45.0, late=16)})
    assert lag["verdict"] == rule.UNFAITHFUL
    assert (lag["loop_lag"]["p95_ms_pooled_le"], lag["loop_lag"]["p99_ms_pooled_le"]) == (50, 50)
    assert lag["loop_lag"]["late_share"] == round(16 / 300, 4)
    assert lag["reasons"] == ["node event loops late: 5.3% of 300 ticks over 20 ms (> 5%; worst node's p99 45 ms "
                              "at n1)"]
    probes = _phase(**{**QUIET, "probes": _probes([100.0, 115.0, 130.0])})  # 2 of 3 over 10% + 2 ms
    assert probes["reasons"] == ["2 of 3 RTT probes off the plan by more than 10% + 2 ms (median error +15.0 ms)"]
    assert _phase(**{**QUIET, "probes": _probes([100.0, 111.9, 130.0])})["verdict"] == rule.FAITHFUL  # 1 of 3
    # the run queue counts where the kernel has no PSI; with PSI, pressure says whether tasks waited
    runq = _phase(**{**QUIET, "samples": _samples(12, runnable=1.0, psi=None) + _samples(8, runnable=2.0, psi=None)})
    assert runq["reasons"] == ["run queue above 1.5 per core in 40% of 20 samples (max 2.0)"]
    assert _phase(**{**QUIET, "samples": _samples(14, psi=None) + _samples(6, runnable=2.0, psi=None)}
                  )["verdict"] == rule.FAITHFUL
    assert _phase(**{**QUIET, "samples": _samples(12, runnable=1.0) + _samples(8, runnable=2.0)}
                  )["verdict"] == rule.FAITHFUL
    psi = _phase(**{**QUIET, "samples": _samples(10) + _samples(10, psi=60.0)})
    assert psi["reasons"] == ["CPU pressure (PSI some) above 50% in 50% of 20 samples"]
    steal = _phase(**{**QUIET, "samples": _samples(20, steal=0.2)})
    assert steal["reasons"] == ["CPU steal above 10% in 100% of 20 samples"]
    late = _phase(**QUIET, late={"<0.1": 980, "<10": 5, "<20": 10, ">=20": 5})
    assert late["reasons"] == ["delay line behind: 1.5% of 1000 packets 10 ms or more late (>= 1%)"]
    assert _phase(**QUIET, late={"<0.1": 995, "<20": 5})["verdict"] == rule.FAITHFUL


def test_no_psi_and_foreign_nodes_are_said():
    phase = _phase(samples=_samples(5, psi=None), lag={}, foreign=["n7", "n8"])
    assert phase["host"]["psi_some_pct"] == "no PSI" and phase["verdict"] == rule.FAITHFUL
    assert phase["loop_lag"] == {"nodes": 0, "not_measured": "2 nodes (no loop-lag figure from their implementation)"}
    assert "no PSI" in phase_line(phase) and "loop lag not measured for 2 nodes" in phase_line(phase)


def test_nothing_measured():
    assert _phase()["verdict"] == rule.NOT_MEASURED


def test_the_run_is_judged_on_load_and_drain():
    bad, good = _phase(**{**QUIET, "lag": _lag(40.0, late=30)}), _phase(**QUIET)
    verdict, why = rule.overall({rule.BEFORE_T0: bad, rule.LOAD: good, rule.DRAIN: good})
    assert (verdict, why) == (rule.FAITHFUL, []) and rule.line(verdict, why) == "faithful"
    verdict, why = rule.overall({rule.BEFORE_T0: good, rule.LOAD: good, rule.DRAIN: bad})
    assert verdict == rule.UNFAITHFUL and why == ["drain: node event loops late: 10.0% of 300 ticks over 20 ms "
                                                   "(> 5%; worst node's p99 40 ms at n1)"]
    assert rule.line(verdict, why).startswith("UNFAITHFUL: drain: node event loops late")
    assert rule.overall({rule.BEFORE_T0: good})[0] == rule.NOT_MEASURED


def test_thresholds_in_one_place():
    th = rule.Thresholds(lag_ms=50.0)
    phase = rule.judge_phase({"loop_lag": figures.lag_figures(_lag(25.0, late=30), [], th)}, th)
    assert phase["verdict"] == rule.FAITHFUL
    assert "over 20 ms" in rule.describe() and "over 50 ms" in rule.describe(th)
    assert rule.THRESHOLDS.as_dict()["host_share"] == 0.3333


def _executed(action, at, took_s, issued_s=None, node=None):
    t0 = 10**12
    rec = {"action": action, "at": at, "offset_s": took_s, "t_ns": t0 + int(took_s * 1e9),
           "issued_ns": t0 + int((took_s if issued_s is None else issued_s) * 1e9)}
    return {**rec, "node": node} if node else rec


def test_a_fault_late_makes_the_run_unfaithful_and_says_which():
    on_time = [_executed("partition", 8.0, 8.16), _executed("heal", 18.0, 18.0),
               # a restart is issued on time; the node's own start-up is not lateness
               _executed("kill", 4.0, 4.0, node="n5"), _executed("restart", 6.0, 8.5, issued_s=6.05, node="n5")]
    assert rule.fault_reasons(on_time) == []
    late = [_executed("partition", 8.0, 20.66, issued_s=8.0), _executed("heal", 18.0, 20.67, issued_s=20.66),
            _executed("restart", 6.0, 9.0, issued_s=7.5, node="n5")]
    why = rule.fault_reasons(late)
    assert len(why) == 3 and "partition planned at T0+8s came 12.7 s late" in why[0], why
    assert "began 0.0 s late, then 12.7 s changing the links" in why[0], why  # where the time went
    assert "began 2.7 s late, then 0.0 s changing" in why[1], why
    assert "restart n5" in why[2] and "1.5 s late" in why[2], why
    # a degrade changes the node's links: late until they are changed, as a partition
    why = rule.fault_reasons([_executed("degrade", 90.0, 91.6, issued_s=90.0, node="n17"),
                              _executed("restore", 130.0, 130.59, issued_s=130.0, node="n17")])
    assert len(why) == 1 and "degrade n17 planned at T0+90s came 1.6 s late" in why[0], why
    assert "began 0.0 s late, then 1.6 s changing the links" in why[0], why
    assert "fault of its timeline" in rule.describe()


def test_exactly_half_the_probes_off_is_faithful_and_more_than_half_is_not():
    """"More than half of the RTT probes off": 2 of 4 (and 3 of 6) leave the phase faithful, 3 of 4
    make it unfaithful; a probe exactly RTT_ERROR_SHARE + RTT_ERROR_MS off is not off."""
    on, off = 100.5, 130.0
    for measured in ([on, on, off, off], [on, off, on, off, on, off]):
        half = _phase(**{**QUIET, "probes": _probes(measured)})
        assert half["probes"]["off_share"] == 0.5
        assert half["verdict"] == rule.FAITHFUL and half["reasons"] == [], half["reasons"]
    over = _phase(**{**QUIET, "probes": _probes([on, off, off, off])})
    assert over["verdict"] == rule.UNFAITHFUL
    assert over["reasons"] == ["3 of 4 RTT probes off the plan by more than 10% + 2 ms (median error +30.0 ms)"]
    edge = _phase(**{**QUIET, "probes": _probes([112.0, 88.0, 112.0])})  # 10 ms + 2 ms either way: in bounds
    assert edge["probes"]["off"] == 0 and edge["verdict"] == rule.FAITHFUL
    assert _phase(**{**QUIET, "probes": _probes([112.1, 87.9, 112.1])})["verdict"] == rule.UNFAITHFUL


def test_the_delay_line_and_host_thresholds_at_their_boundaries():
    """The delay line: 1% of its packets 10 ms late is already a reason (>=), 0.9% is not. The host: a
    share of samples equal to host_share is not above it, one sample more is."""
    assert _phase(**QUIET, late={"<0.1": 990, "<20": 10})["verdict"] == rule.UNFAITHFUL
    assert _phase(**QUIET, late={"<0.1": 991, "<20": 9})["verdict"] == rule.FAITHFUL
    th = rule.Thresholds(host_share=0.5)
    judge = lambda samples: rule.judge_phase({"host": figures.host_figures(samples, th)}, th)  # noqa: E731
    assert judge(_samples(10) + _samples(10, psi=60.0))["verdict"] == rule.FAITHFUL  # 50%: not above
    assert judge(_samples(9) + _samples(11, psi=60.0))["verdict"] == rule.UNFAITHFUL
    assert judge(_samples(20, psi=50.0))["verdict"] == rule.FAITHFUL  # at PSI_SOME_PCT: not above it
    assert judge(_samples(10) + _samples(10, steal=0.2))["verdict"] == rule.FAITHFUL
    assert judge(_samples(9) + _samples(11, steal=0.2))["verdict"] == rule.UNFAITHFUL
