"""Time dilation in the scenario (docs/dilation.md): the `dilation` field, and which nodes can be dilated.

The plan stays in experiment time. Nodes and the orchestrator run on a dilated clock (node/dilation.py),
which scales every instant, duration and timer; what no clock can scale is the network itself, so the
links' shapes (link_shape.py, `link_shapes`) have every latency multiplied by k and every rate divided by
k, and so do a degrade's (orchestrator/faults/next_shapes.py, as the quantities' `kind` in fault_actions.py says).
May import: the rest of orchestrator/model, node.adapters; never orchestrator/run, sim or fidelity.
"""
from __future__ import annotations

import math

from pydantic import Field

from node.adapters import PEERLAB, get_adapter

DOC = ("time dilation k (docs/dilation.md): the run takes k times its real time while its nodes see a network k "
       "times faster, so each node has k times the CPU per second of the experiment. Latencies, timers, "
       "schedules and the fault timeline run k times slower, bandwidths k times lower; every time reported "
       "is experiment time. 1 (the default): off; at most 100. Only peerlab's own nodes can be dilated. `peerlab "
       "run --dilate K` sets it")
MAX = 100.0
STEP = 0.5  # the granularity of the k peerlab advises or chooses (admission, --dilate auto): a whole
            # k past the model's edge costs up to twice the run's time (0.83 cores' worth against 0.8 took 2)


def step_up(k: float) -> float:
    """The least multiple of STEP at or above k (and at least 1)."""
    return max(1.0, math.ceil(k / STEP - 1e-9) * STEP)


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
