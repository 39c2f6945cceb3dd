"""A manifest's `fidelity` section made by the rule itself (orchestrator/fidelity), faithful or not."""
from orchestrator.fidelity import figures, rule
from orchestrator.fidelity.host import Sample


def section(lag_p99_ms: float) -> dict:
    late = 30 if lag_p99_ms > 20 else 0  # 10% of the ticks in 20-50 ms
    lag = {"n0": {"tick_ms": 50.0, "samples": 300, "next": 300, "p50_ms": 0.4, "p99_ms": lag_p99_ms,
                  "max_ms": 2 * lag_p99_ms, "hist": [300 - late, 0, 0, 0, 0, late, 0, 0, 0, 0, 0]}}
    samples = [Sample(at=float(i), busy=0.6, steal=0.0, runnable_per_core=0.7, psi_some_pct=8.0, psi_some_avg10=6.0)
               for i in range(10)]
    probes = [{"a": "n0", "b": "n1", "configured_ms": 100.0, "measured_ms": 100.8}]
    phases = {p: rule.judge_phase({"host": figures.host_figures(samples), "loop_lag": figures.lag_figures(lag, []),
                                   "probes": figures.probe_figures(probes)}) for p in rule.PHASES}
    verdict, why = rule.overall(phases)
    return {"verdict": verdict, "reasons": why, "line": rule.line(verdict, why), "rule": rule.describe(),
            "thresholds": rule.THRESHOLDS.as_dict(), "phases": phases}
