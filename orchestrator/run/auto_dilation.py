"""`--dilate auto` (docs/dilation.md#auto): the dilation a run needs on this machine, chosen by peerlab
and checked by the run's own verdict.

The first k comes from admission's CPU model (admission.py): the least k that keeps the run's work
within FAITHFUL_CPU_SHARE of the cores, the share above which the bench's runs were unfaithful (the
"fits" of a refusal, all the cores, is not enough for trustworthy timing). The model cannot know
everything (CPU per message varies with message size, fan-out and implementation), so the run is the
measurement: one judged unfaithful on grounds the CPU explains (late event loops, a delay line behind,
CPU pressure, probes off the plan, faults late) is run again at GROWTH times its k, ATTEMPTS runs at
most, each kept in the store and named in the next one's manifest (`dilation.auto`). A run unfaithful
for another reason (a node that exited on its own) is not run again: no k would change that.

Backends without a CPU model (kubernetes: the nodes' machines are not this one) start at the
scenario's k and are raised by the verdict alone; the simulator's time is virtual and needs none.

May import: orchestrator.run.admission, orchestrator.model, orchestrator.fidelity.rule, orchestrator.backends'
names (SIMULATOR)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.backends import SIMULATOR
from orchestrator.fidelity import rule
from orchestrator.model import dilation as dilation_rules
from orchestrator.model.scenario import Scenario
from orchestrator.run import admission

ATTEMPTS = 3    # runs at most, the first included
GROWTH = 1.5    # the next attempt's k, times the last one's, rounded up to dilation's STEP
CPU_FIGURES = ("probes", "loop_lag", "delay_line", "host")  # a phase's figures the CPU's shortage moves


@dataclass(frozen=True)
class Choice:
    k: float
    why: str


def _undilated_cores(need: admission.Estimate) -> float:
    return need.fixed_cores + (need.cpu_cores - need.fixed_cores) * need.dilation


def first_choice(scenario: Scenario, backend: str, machine: admission.Machine | None = None) -> Choice:
    """The k to start from, and why (for the console and the manifest)."""
    if backend == SIMULATOR:
        return Choice(1.0, "the simulator's time is virtual: no dilation needed")
    if backend not in admission.CHECKED_BACKENDS or not admission.COSTS_FILE.exists():
        return Choice(scenario.dilation, f"no CPU model for the {backend} backend's machines: starting at "
                                         f"{scenario.dilation:g}, raised if the verdict says the CPU fell behind")
    machine = machine or admission.Machine.here()
    need = admission.estimate(scenario, backend)
    if not need.dilatable:
        return Choice(1.0, "its implementations cannot be dilated (docs/dilation.md)")
    share = admission.FAITHFUL_CPU_SHARE * machine.cpus
    k = need.dilation_for(share)
    why = (f"{_undilated_cores(need):.2f} cores' worth of node work and traffic undilated; the bench's runs "
           f"were faithful within {admission.FAITHFUL_CPU_SHARE:.0%} of the cores ({share:g} of {machine.cpus})")
    if k > dilation_rules.MAX:
        needed = "no k would do" if math.isinf(k) else f"{k:g} would be needed"
        return Choice(dilation_rules.MAX, why + f"; {needed}, {dilation_rules.MAX:g} is the most")
    return Choice(k, why)


def wanted(scenario: Scenario, backend: str, dilate: str | None, machine: admission.Machine | None = None) -> bool:
    """Whether the run's k is peerlab's to choose: `--dilate auto`, or, with no k given anywhere, a run whose
    CPU work undilated is past the faithful share of this machine's cores (refused, or admitted with the
    warning that its timing will likely be unfaithful), with nothing but the CPU against it: the run a
    user wants then is a faithful one, not a refusal or an untrustworthy one (`--dilate 1`, with
    `--force` past all the cores, runs it undilated). The two repository scenarios in the warning's band
    ran unfaithful undilated and faithful at auto's k (docs/results.md, "Time dilation")."""
    if dilate == "auto":
        return True
    if dilate is not None or "dilation" in scenario.model_fields_set:
        return False
    if backend not in admission.CHECKED_BACKENDS or not admission.COSTS_FILE.exists():
        return False
    machine = machine or admission.Machine.here()
    need = admission.estimate(scenario, backend)
    found = admission.problems(need, machine)
    return (need.dilatable and all(p.startswith("CPU:") for p in found)
            and need.cpu_cores > admission.FAITHFUL_CPU_SHARE * machine.cpus)


def cpu_reasons(manifest: dict[str, Any]) -> list[str]:
    """The verdict's reasons a larger k would address (empty: faithful, or unfaithful for another reason)."""
    section = manifest.get("fidelity") or {}
    if section.get("verdict") != rule.UNFAITHFUL:
        return []
    out = []
    for phase in rule.JUDGED:
        fig = (section.get("phases") or {}).get(phase) or {}
        out += [f"{phase}: {r}" for r in rule.reasons({k: fig[k] for k in CPU_FIGURES if k in fig})]
    return out + rule.fault_reasons(manifest.get("faults_executed") or [])


def next_k(k: float) -> float | None:
    """The next attempt's k (GROWTH times this one's, rounded up to a STEP), or None past the limit."""
    nxt = min(dilation_rules.MAX, dilation_rules.step_up(k * GROWTH))
    return nxt if nxt > k else None


def attempt(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the next attempt's manifest says of this one."""
    section = manifest.get("fidelity") or {}
    return {"dilation": (manifest.get("dilation") or {}).get("factor"), "run_id": manifest.get("run_id"),
            "verdict": section.get("verdict"), "cpu_reasons": cpu_reasons(manifest)}


def record(choice: Choice, k: float, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's `dilation.auto`: the first choice and why, this attempt, the ones before it."""
    return {"first": choice.k, "why": choice.why, "attempt": len(earlier) + 1, "of_at_most": ATTEMPTS,
            "growth": GROWTH, "k": k, "earlier": earlier}
