"""Time dilation's clock: a run k times slower than real time, seen from inside as a network k times faster.

Experiment time runs k times slower than the wall clock from a common epoch (the run's start, the same
instant for every node and the orchestrator):  exp = epoch + (real - epoch) / k. A timer of d experiment
seconds is armed for k*d real seconds. The node runtime drives its protocol core, its schedule and its
event log on this clock, and the orchestrator its T0, fault timeline and samples, so every timer scales
without touching a parameter and every timestamp written is in experiment time. k = 1 is the wall clock
itself, exactly.

A clock may also read `shift_ns` ahead of the machine's (negative: behind), as a machine whose clock
is off would: every instant the node reads, logs and answers is shifted, the orchestrator measures the
shift like any offset and the analysis takes it out (`clock_shift` says where it comes from).
"""
from __future__ import annotations

import json
import os
import time

SHIFTS_ENV = "PEERLAB_CLOCK_SHIFTS"        # {"<cluster node>": ns}: the chart's clockShiftNs
CLUSTER_NODE_ENV = "PEERLAB_CLUSTER_NODE"  # the pod's cluster node (the downward API's spec.nodeName)


def clock_shift() -> int:
    """How far this node's clock reads from its machine's: the shift the chart's clockShiftNs gives
    the pods of its cluster node (a test of the clock correction moves one node's clock so); else 0."""
    try:
        shifts = json.loads(os.environ.get(SHIFTS_ENV) or "{}")
        return int(shifts.get(os.environ.get(CLUSTER_NODE_ENV, ""), 0))
    except (ValueError, TypeError, AttributeError):
        return 0


class Dilation:
    def __init__(self, factor: float = 1.0, epoch_ns: int = 0, shift_ns: int = 0):
        if factor < 1:
            raise ValueError(f"a dilation factor is at least 1 (1: real time), got {factor}")
        self.factor = float(factor)
        self.epoch_ns = int(epoch_ns)
        self.shift_ns = int(shift_ns)
        self._mono0 = time.monotonic()

    @property
    def on(self) -> bool:
        return self.factor != 1.0

    # instants: real <-> experiment -------------------------------------------------------------
    def experiment_ns(self, real_ns: int) -> int:
        """The experiment-time instant (unix ns) of a wall-clock instant."""
        if not self.on:
            return real_ns
        return self.epoch_ns + round((real_ns - self.epoch_ns) / self.factor)

    def real_ns(self, experiment_ns: int) -> int:
        """The wall-clock instant (unix ns) of an experiment-time instant."""
        if not self.on:
            return experiment_ns
        return self.epoch_ns + round((experiment_ns - self.epoch_ns) * self.factor)

    # durations ---------------------------------------------------------------------------------
    def real(self, seconds: float) -> float:
        """Real seconds that `seconds` of experiment time take (a timer's wait)."""
        return seconds * self.factor

    def experiment(self, seconds: float) -> float:
        """Experiment seconds that `seconds` of real time are."""
        return seconds / self.factor

    # now ---------------------------------------------------------------------------------------
    def time_ns(self) -> int:
        return self.experiment_ns(time.time_ns() + self.shift_ns)

    def time(self) -> float:
        return self.time_ns() / 1e9

    def monotonic(self) -> float:
        """A monotonic experiment clock (for differences only: the cores' clock)."""
        now = time.monotonic()
        return now if not self.on else self._mono0 + (now - self._mono0) / self.factor

    def monotonic_ns(self) -> int:
        return time.monotonic_ns() if not self.on else round(self.monotonic() * 1e9)

    def as_dict(self) -> dict[str, float | int]:
        return {"factor": self.factor, "epoch_ns": self.epoch_ns}


REAL_TIME = Dilation()
