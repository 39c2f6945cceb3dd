"""The node contract for people writing an adapter: `peerlab contract schema|check|implementations`."""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from orchestrator.cli.common import UsageError, add_command, write_json


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "contract",
                    help="the node contract: its JSON Schemas, check a node's log, the implementations",
                    description="Any node peerlab runs follows the node contract (docs/node-contract.md): the "
                                "config it is given, the events it writes, how it starts and stops.",
                    examples=["peerlab contract schema config -o config.schema.json",
                              "peerlab contract check runs/<run>/events/n3.jsonl.gz --config n3.json",
                              "peerlab contract implementations"])
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
    from node.adapters import ADAPTERS, PEERLAB

    print(f"{PEERLAB:<12} installed  peerlab's own protocol cores (every protocol)")
    for adapter in ADAPTERS.values():
        missing = adapter.missing()
        state = "installed" if not missing else f"missing    (install: {adapter.install})"
        print(f"{adapter.name:<12} {state}  {', '.join(adapter.protocols)}: {adapter.description}")
        print(f"{'':<12} parameters: {', '.join(adapter.params)}")
        if adapter.fixed:
            print(f"{'':<12} fixed: " + ", ".join(f"{k} {json.dumps(v)}" for k, v in adapter.fixed.items()))
    return 0
