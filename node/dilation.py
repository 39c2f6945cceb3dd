"""Time dilation's clock: a run k times slower than real time, seen from inside as a network k times faster.

Experiment time runs k times slower than the wall clock from a common epoch (the run's start, the same
instant for every node and the orchestrator):  exp = epoch + (real - epoch) / k. A timer of d experiment
seconds is armed for k*d real seconds. The node runtime drives its protocol core, its schedule and its
event log on this clock, and the orchestrator its T0, fault timeline and samples, so every timer scales
without touching a parameter and every timestamp written is in experiment time. k = 1 is the wall clock
itself, exactly.
"""
from __future__ import annotations

import time


class Dilation:
    def __init__(self, factor: float = 1.0, epoch_ns: int = 0):
        if factor < 1:
            raise ValueError(f"a dilation factor is at least 1 (1: real time), got {factor}")
        self.factor = float(factor)
        self.epoch_ns = int(epoch_ns)
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
        return self.experiment_ns(time.time_ns())

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
