"""Checking a scenario and its plan without running it: `validate`, `plan`, `schema`. `plan` refuses
what `run` would refuse, as early: admission (orchestrator/run/admission.py) before anything is planned.
May import: orchestrator.cli.common, orchestrator.backends' names, orchestrator.model, orchestrator.run.admission (lazily)."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrator.backends import TARGETS
from orchestrator.cli.common import UsageError, add_command, dilated, err, load, scenario_args, write_json


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "validate", help="check a scenario and exit (2 if invalid)",
                    examples=["peerlab validate scenarios/quickstart.yaml",
                              "peerlab validate my.yaml --set nodes.count=500 --matrix protocol.name=floodsub,gossipsub"])
    scenario_args(p)
    p.set_defaults(func=cmd_validate)

    p = add_command(sub, "plan", help="show the plan a scenario and seed give, without running it",
                    description="Show the plan a scenario and seed give, without running it. A scenario that "
                                "`peerlab run` would refuse on this machine (admission: memory, CPU, file "
                                "descriptors, disk) is refused before planning (exit 2), as run refuses it.",
                    examples=["peerlab plan scenarios/quickstart.yaml --seed 7",
                              "peerlab plan scenarios/quickstart.yaml --json   # the whole plan the nodes get",
                              "peerlab plan scenarios/sim-gossipsub-1000.yaml --backend sim"])
    scenario_args(p)
    p.add_argument("--seed", type=int)
    p.add_argument("--json", action="store_true", help="print the whole RunPlan as JSON")
    p.add_argument("--backend", choices=TARGETS, default="local",
                   help="the backend whose admission applies, as for run (default local; sim: not checked)")
    p.add_argument("--force", action="store_true", help="plan even what admission refuses (as run --force)")
    p.set_defaults(func=cmd_plan)

    p = add_command(sub, "schema", help="print the scenario JSON Schema (for editors)",
                    examples=["peerlab schema -o scenario.schema.json"])
    p.add_argument("--output", "-o", help="write to this file instead of stdout")
    p.set_defaults(func=cmd_schema)


def _fault_target(f: Any) -> str:
    """What a planned fault acts on, as its row says: the sides, or the node and the quantities it carries."""
    from orchestrator.model.fault_actions import ACTIONS, SIDES

    row = ACTIONS[f.action]
    if SIDES in row.requires:
        return " | ".join(f"{len(g)} nodes ({', '.join(g[:3])}{', ...' if len(g) > 3 else ''})" for g in f.groups)
    if row.quantities:
        return f"{f.node}: " + ", ".join(q.show(getattr(f, q.event)) for q in row.quantities if getattr(f, q.event))
    return f.node


def cmd_validate(args: argparse.Namespace) -> int:
    from orchestrator.model.bounded import shown

    for combo in load(args):
        sc = combo.scenario
        print(f"ok: {shown(args.scenario, 200)}{f' [{shown(combo.label, 200)}]' if combo.label else ''}: scenario {sc.name!r}, "
              f"{sc.nodes.count} nodes, protocol {sc.protocol.name}, {sc.topics.count} topics, "
              f"latency model {sc.network.latency.model}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from orchestrator.model.scenario import json_schema

    write_json(json_schema(), args.output)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from orchestrator.model.plan import make_plan

    combos = load(args)
    if len(combos) > 1:
        raise UsageError(f"{args.scenario} expands to {len(combos)} combinations; plan shows one: pin the "
                          "matrix with --set (e.g. --set " + combos[0].overrides[0] + ")")
    from orchestrator.run import auto_dilation
    from orchestrator.run.admission import AdmissionError, admit

    chosen = None  # the dilation `peerlab run` would choose (a run that does not fit the CPU undilated)
    if auto_dilation.wanted(combos[0].scenario, args.backend, None):
        chosen = auto_dilation.first_choice(combos[0].scenario, args.backend)
        combos[0] = dilated(args, combos[0], chosen.k)
    try:  # as `peerlab run` does, before anything is planned (5000 nodes take a minute and gigabytes)
        admit(combos[0].scenario, args.backend, args.force)
    except AdmissionError as e:
        err.print("refused: " + str(e), style="bold red", markup=False, highlight=False)
        return 2
    plan = make_plan(combos[0].scenario, args.seed)
    if args.json:
        print(plan.model_dump_json(indent=1))
        return 0
    degrees = [len(n.neighbours) for n in plan.nodes]
    subs = [len(n.subscriptions) for n in plan.nodes]
    print(f"scenario {plan.scenario}, seed {plan.seed}: {len(plan.nodes)} nodes, protocol {plan.protocol}")
    print(f"  neighbours per node: min {min(degrees)}, max {max(degrees)}")
    print(f"  topics: {len(plan.topics)}; subscriptions per node: min {min(subs)}, max {max(subs)}")
    print(f"  publishes: {plan.publishes()} by {sum(1 for n in plan.nodes if n.schedule)} publishers; "
          f"run length {plan.end:g}s after T0"
          + (f" (experiment time; dilated x{plan.dilation:g}: {plan.end * plan.dilation:g}s of real time)"
             if plan.dilation != 1 else ""))
    print(f"  faults: {len(plan.faults)}" + "".join(f"\n    T0+{f.at:g}s {f.action} {_fault_target(f)}"
                                                 for f in plan.faults))
    absent = [n.id for n in plan.nodes if n.absent]
    if absent:
        print(f"  absent at T0 (join later, or churn reserve): {', '.join(absent)}")
    print(_admission_line(combos[0].scenario))
    if chosen is not None:
        print(f"  dilation x{chosen.k:g}: what `peerlab run` chooses for it (--dilate auto: {chosen.why}; it runs "
              "again at a larger k if the verdict says the CPU fell behind; --dilate 1 --force runs it undilated)")
    return 0


def _admission_line(scenario: Any) -> str:
    """What a local run of it needs here (and a docker run's memory), against what this machine has
    (orchestrator/run/admission.py)."""
    from orchestrator.run import admission

    need, here = admission.estimate(scenario, "local"), admission.Machine.here()
    docker = admission.estimate(scenario, "docker")
    found, warned = admission.problems(need, here), admission.warnings(need, here)
    verdict = ("fits" + (" (" + "; ".join(warned) + ")" if warned else "") if not found else "does not fit ("
               + "; ".join(found) + f"); at most {admission.largest_fit(need, here)} nodes fit, or run with --force")
    probes = f", {need.probes:.0f} probe processes beside adapter nodes among it" if need.probes else ""
    return (f"  on this machine (local backend): needs {need.memory_mib / 1024:.2f} GiB memory "
            f"({docker.memory_mib / 1024:.2f} on docker{probes}), {need.cpu_cores:.2f} cores, {need.fds} file descriptors, "
            f"{need.disk_mib:.0f} MiB of logs; has {here.memory_mib / 1024:.1f} GiB, {here.cpus} cores, "
            f"{here.fds} fds, {here.disk_mib / 1024:.0f} GiB free: {verdict}")
