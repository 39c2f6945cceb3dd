"""The node contracts for people writing an adapter: `peerlab contract schema|check|implementations`, and
the gossipsub-interop contract's scripts: `peerlab contract interop-export|interop-import|interop-check`."""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from orchestrator.cli.common import UsageError, add_command, err, load, scenario_args, write_json


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "contract",
                    help="the node contract: its JSON Schemas, check a node's log, the implementations",
                    description="Any node peerlab runs follows the node contract (docs/node-contract.md): the "
                                "config it is given, the events it writes, how it starts and stops.",
                    examples=["peerlab contract schema config -o config.schema.json",
                              "peerlab contract check runs/<run>/events/n3.jsonl.gz --config n3.json",
                              "peerlab contract implementations",
                              "peerlab contract interop-export scenarios/interop-subnet-blob-msg.yaml -o params.json",
                              "peerlab contract interop-check params.json",
                              "peerlab contract interop-import params.json --base scenarios/interop-subnet-blob-msg.yaml "
                              "-o imported.yaml"])
    csub = p.add_subparsers(dest="contract_command", metavar="WHAT", required=True)
    s = csub.add_parser("schema", help="print the JSON Schema of the node config or of one event")
    s.add_argument("which", choices=["config", "events"])
    s.add_argument("--output", "-o", help="write to this file instead of stdout")
    s.set_defaults(func=cmd_schema)
    c = csub.add_parser("check", help="check an event log (and a config) against the contract; exit 1 if not")
    c.add_argument("log", type=Path, help="a node's event log (.jsonl, or .jsonl.gz as a run stores it)")
    c.add_argument("--config", type=Path, help="the node's config file, checked too")
    c.set_defaults(func=cmd_check)
    i = csub.add_parser("implementations", help="the node implementations, and whether each is installed")
    i.set_defaults(func=cmd_implementations)
    r = csub.add_parser("register", help="register a gossipsub-interop binary of yours as interop:NAME",
                        description="Registers a binary of the gossipsub-interop contract under a name a scenario "
                                    "can give as `implementation: interop:NAME`. A scenario never names a path: "
                                    "what it may run is what this machine's user registered (an adapter.json per "
                                    "program, in $PEERLAB_ADAPTERS or else ~/.config/peerlab/adapters).")
    r.add_argument("name", help="the name scenarios use after interop:")
    r.add_argument("binary", type=Path, help="the program (it takes --params params.json)")
    r.add_argument("--dir", type=Path, help="register into this folder instead (then pass it as "
                                            "PEERLAB_ADAPTERS=DIR or --adapters DIR to run and validate)")
    r.set_defaults(func=cmd_register)
    e = csub.add_parser("interop-export", help="a scenario's plan as one gossipsub-interop params.json (every "
                                               "node's script, times from the binaries' common start)")
    scenario_args(e)
    e.add_argument("--seed", type=int, default=None, help="plan with this seed instead of the scenario's")
    e.add_argument("--lead", type=int, default=15, metavar="S",
                   help="whole seconds from the binaries' start to T0 (default 15; they connect 2 s after their "
                        "start, one peer after another, and form their meshes until T0)")
    e.add_argument("--output", "-o", help="write to this file instead of stdout")
    e.set_defaults(func=cmd_interop_export)
    m = csub.add_parser("interop-import", help="a gossipsub-interop params.json as a peerlab scenario (its links, "
                                               "subscriptions and publishes listed; the network from --base)",
                        description="Reads the script every node of a gossipsub-interop experiment runs and writes "
                                    "the scenario that plans the same: GossipSub parameters and validation delay, "
                                    "who dials whom (topology.algorithm: given), every subscription (topics.subscriptions.model: "
                                    "given) and publish (workload.schedule), T0 at --lead seconds after the binaries' "
                                    "start. A params.json holds no network: --base names a scenario that brings it "
                                    "(with node groups, implementations, seed, warm-up, drain, faults, churn); "
                                    "without one, their eight regions and 50 Mbit/s per node. An export of a "
                                    "scenario imported over that scenario plans the same (docs/interop.md).")
    m.add_argument("params", type=Path, help="their params.json ({\"script\": [...]})")
    m.add_argument("--base", metavar="SCENARIO", help="the scenario whose network, groups and timing the import keeps")
    m.add_argument("--lead", type=int, default=15, metavar="S",
                   help="whole seconds from the binaries' start to T0 (default 15, as interop-export); a publish "
                        "before it is refused")
    m.add_argument("--nodes", type=int, metavar="N", help="how many nodes (default: as many as the script names)")
    m.add_argument("--name", help="the scenario's name (default: the params file's name)")
    m.add_argument("--implementation", help="protocol.implementation, e.g. interop:my-gossipsub (registered) or go-libp2p "
                                            "(default: the base's, else peerlab)")
    m.add_argument("--output", "-o", help="write the scenario here instead of stdout")
    m.set_defaults(func=cmd_interop_import)
    k = csub.add_parser("interop-check", help="check a params.json against the gossipsub-interop instructions' "
                                              "schema; exit 1 if it does not follow it")
    k.add_argument("params", type=Path)
    k.set_defaults(func=cmd_interop_check)


def cmd_schema(args: argparse.Namespace) -> int:
    from node import contract

    write_json(contract.config_schema() if args.which == "config" else contract.events_schema(), args.output)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from node import contract

    if not args.log.exists():
        raise UsageError(f"{args.log}: no such file")
    opener = gzip.open if args.log.suffix == ".gz" else open
    with opener(args.log, "rt") as f:
        problems = contract.check_log(f.read().splitlines())
    if args.config:
        try:
            contract.ContractConfig.model_validate_json(args.config.read_text())
        except ValidationError as e:
            problems += [f"config: {'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()]
    for line in problems:
        print(line)
    print(f"{args.log}: {'conforms to' if not problems else f'{len(problems)} problems with'} "
          f"node contract v{contract.CONTRACT_VERSION}")
    return 1 if problems else 0


def cmd_implementations(args: argparse.Namespace) -> int:
    from node.adapters import ADAPTERS, INTEROP, PEERLAB, interop_adapter, user_adapters, user_dirs

    print(f"{PEERLAB:<12} installed  peerlab's own protocol cores (every protocol)")
    for adapter in ADAPTERS.values():
        missing = adapter.missing()
        state = "installed" if not missing else f"missing    (install: {adapter.install})"
        print(f"{adapter.name:<12} {state}  {', '.join(adapter.protocols)}: {adapter.description}")
        print(f"{'':<12} parameters: {', '.join(adapter.params)}")
        if adapter.fixed:
            print(f"{'':<12} fixed: " + ", ".join(f"{k} {json.dumps(v)}" for k, v in adapter.fixed.items()))
        if adapter.interop:
            print(f"{'':<12} gossipsub-interop's contract too: {INTEROP}{adapter.name} "
                  f"({adapter.interop_program()} --params params.json)")
    registered = {n: s for n, s in user_adapters().items() if isinstance(s.get("interop"), str)}
    for name, spec in registered.items():
        interop = interop_adapter(f"{INTEROP}{name}")
        state = "installed" if not interop.missing() else "missing  "
        print(f"{INTEROP + name:<12} {state}  registered by you ({spec['directory']}): {spec['interop']}, a "
              f"gossipsub-interop binary (local backend; {', '.join(interop.protocols)})")
    print(f"{INTEROP + 'NAME':<12} your own gossipsub-interop binary: peerlab contract register NAME BINARY "
          f"(registered in {', '.join(map(str, user_dirs()))}; docs/interop.md)")
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    from node.adapters import INTEROP, register

    try:
        path = register(args.name, args.binary, args.dir)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    print(f"registered {INTEROP}{args.name}: {path}")
    return 0


CONNECT_AFTER_START = 2  # seconds: every binary of an exported experiment listens by then


def cmd_interop_export(args: argparse.Namespace) -> int:
    from node.interop import script
    from orchestrator.model.plan import make_plan

    combos = load(args)
    if len(combos) > 1:
        raise UsageError(f"{args.scenario} expands to {len(combos)} combinations; export one: pin the matrix "
                         "with --set (e.g. --set " + combos[0].overrides[0] + ")")
    if args.lead < 3:
        raise UsageError("--lead: at least 3 s (the binaries connect 2 s after their start, once they all listen)")
    plan = make_plan(combos[0].scenario, args.seed)
    if plan.protocol != "gossipsub":
        raise UsageError(f"{args.scenario}: gossipsub-interop runs gossipsub, not {plan.protocol}")
    configs = [{"node_id": n.id, "params": n.params, "subscriptions": n.subscriptions, "dial": n.dial,
                "late_subscriptions": n.late_subscriptions, "schedule": n.schedule} for n in plan.nodes]
    try:
        params = script.experiment(configs, args.lead, CONNECT_AFTER_START, plan.end)
    except ValueError as e:
        raise UsageError(f"{args.scenario}: {e}") from None
    write_json(params, args.output)
    return 0


def cmd_interop_import(args: argparse.Namespace) -> int:
    import re

    import yaml

    from node.interop import reading
    from orchestrator.model import imported
    from orchestrator.model.scenario import load_scenario, read_data, read_file, validate_data

    params, problems = _read_params(args.params)
    if problems:
        raise UsageError(f"{args.params}: does not follow the gossipsub-interop instruction schema: {problems[0]}"
                         f"{f' (and {len(problems) - 1} more: peerlab contract interop-check)' if len(problems) > 1 else ''}")
    named = reading.node_count(params)
    nodes = named if args.nodes is None else args.nodes
    if nodes < 1:
        raise UsageError(f"{args.params}: the script names no node (no ifNodeIDEquals or connect); give --nodes N"
                         if args.nodes is None else f"--nodes {nodes}: give 1 or more")
    if nodes < named:
        raise UsageError(f"--nodes {nodes}: the script names {named} nodes (node ids 0..{named - 1})")
    if not 0 <= args.lead <= 100_000:
        raise UsageError(f"--lead {args.lead}: whole seconds from the binaries' start to T0, 0 or more")
    base = window = None
    access = None
    if args.base:
        from orchestrator.model.data_files import DataAccess

        base = read_data(read_file(args.base), args.base)
        base_plan = load_scenario(args.base).workload
        window = (base_plan.warmup, base_plan.duration, base_plan.drain)
        access = DataAccess.for_scenario(args.base)  # the base's data files, where the base names them
    stem = f"{base['name']}-imported" if base and isinstance(base.get("name"), str) else args.params.stem
    name = args.name or re.sub(r"[^A-Za-z0-9_.-]", "-", stem)[:64].strip("-._") or "imported"
    notes: list[str] = []
    try:
        data = imported.scenario(reading.read(params, nodes), name=name, lead=args.lead, base=base, window=window,
                                 implementation=args.implementation, notes=notes)
    except ValueError as e:
        raise UsageError(f"{args.params}: {e}") from None
    validate_data(data, f"{args.params} (imported)", access=access)
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
    if args.output:
        Path(args.output).write_text(text)
        links = sum(len(peers) for peers in data["topology"]["dial"].values())
        err.print(f"wrote {args.output}: {nodes} nodes, {links} links, {len(data['workload']['schedule'])} publishes; "
                  f"network {'from ' + args.base if args.base else 'their eight regions, 50 Mbit/s per node'}")
    else:
        print(text, end="")
    return 0


def _read_params(path: Path) -> tuple[dict, list[str]]:
    """A params.json, and what in it does not follow the contract's instruction schema."""
    from node.interop import script

    try:
        params = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: {e}") from None
    except RecursionError:
        raise UsageError(f"{path}: not a params.json (JSON nested too deep)") from None
    return params, script.problems(params)


def cmd_interop_check(args: argparse.Namespace) -> int:
    params, problems = _read_params(args.params)
    for line in problems:
        print(line)
    print(f"{args.params}: {'follows' if not problems else f'{len(problems)} problems with'} the gossipsub-interop "
          "instruction schema")
    return 1 if problems else 0
