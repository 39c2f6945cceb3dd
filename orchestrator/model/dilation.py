"""Time dilation in the scenario and the plan (docs/dilation.md): the `dilation` field, which nodes can be
dilated, and the plan as shaping applies it in real time.

The plan stays in experiment time. Nodes and the orchestrator run on a dilated clock (node/dilation.py),
which scales every instant, duration and timer; what no clock can scale is the network itself, so
`shaping_plan` gives shaping the plan with every latency multiplied by k and every rate divided by k
(a fault's quantities as their `kind` in orchestrator/model/fault_actions.py says).
May import: the rest of orchestrator/model, node.adapters; never orchestrator/run, sim or fidelity.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from node.adapters import PEERLAB, get_adapter

from .fault_actions import QUANTITIES, Quantity

if TYPE_CHECKING:
    from .plan import RunPlan

DOC = ("time dilation k (docs/dilation.md): the run takes k times its real time while its nodes see a network k "
       "times faster, so each node has k times the CPU per second of the experiment. Latencies, timers, "
       "schedules and the fault timeline run k times slower, bandwidths k times lower; every time reported "
       "is experiment time. 1 (the default): off; at most 100. Only peerlab's own nodes can be dilated. `peerlab "
       "run --dilate K` sets it")
MAX = 100.0


def field():
    return Field(1.0, ge=1.0, le=MAX, description=DOC)


def refusal(factor: float, implementations: dict[str, str]) -> str | None:
    """Why a run dilated by `factor` cannot have these implementations (where chosen -> which), or None.
    An adapter's node runs a library whose timers are its own: it could be dilated only if every one of
    them could be scaled, and each adapter names those it cannot (adapter.json `timers_fixed`)."""
    if factor == 1:
        return None
    for where, name in implementations.items():
        if name == PEERLAB:
            continue
        fixed = get_adapter(name).timers_fixed
        cannot = (f"in {fixed['in']} these timers are {fixed['why']}: " + "; ".join(fixed["timers"])
                  if fixed.get("timers") else "the node contract (v1) gives its node no dilated clock")
        return (f"dilation: {factor:g} runs every timer of every node {factor:g} times slower, but {where} is "
                f"{name}, which cannot scale all of its timers ({cannot}). Run {name} undilated (leave dilation "
                f"out, or set it to 1; no --dilate), or dilate a run of implementation: peerlab nodes")
    return None


def shaping_plan(plan: RunPlan) -> RunPlan:
    """The plan as shaping applies it on a run dilated by plan.dilation: one-way latencies, jitter and the
    fault timeline's added latencies times k; node and degraded bandwidths divided by k. Times (schedule,
    faults' `at`, phases) are left as they are: the dilated clocks scale those. k = 1: the plan itself."""
    k = plan.dilation
    if k == 1:
        return plan
    return plan.model_copy(update={
        "latency_ms": [[x * k for x in row] for row in plan.latency_ms],
        "latency_bucket_ms": plan.latency_bucket_ms * k,
        "jitter_ms": plan.jitter_ms * k,
        "nodes": [n.model_copy(update={"bandwidth_up": _rate(n.bandwidth_up, k),
                                       "bandwidth_down": _rate(n.bandwidth_down, k)}) for n in plan.nodes],
        "faults": [f.model_copy(update={q.event: _dilated(q, getattr(f, q.event), k) for q in QUANTITIES
                                        if q.kind != "share"}) for f in plan.faults],
    })


def _dilated(q: Quantity, value: float, k: float) -> float:
    """A fault's latency times k, its rate divided by k."""
    return value * k if q.kind == "latency" else _rate(value, k)


def _rate(bps: int, k: float) -> int:
    return max(1, round(bps / k)) if bps else 0
