"""`peerlab overlay`: overlay constructions and their degree statistics."""
from __future__ import annotations

import argparse
import json

from orchestrator.cli.common import UsageError, add_command, err


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "overlay", help="build topic-connected overlays (GM, CD-ODA..., CD-MAX-Ref) and report degrees",
        description="Build overlays on R random workloads and report mean and 95% confidence interval "
                    "of average and maximum degree, edges, connected topics and construction time, as "
                    "the CD-MAX seed's tables do.",
        examples=["peerlab overlay --algorithm cd-max-ref --nodes 1000 --topics 100 --subscriptions 10 --runs 10",
                  "peerlab overlay --compare --nodes 200 --json"])
    p.add_argument("--algorithm", "-a", default="cd-max-ref", choices=sorted(__import__(
        "orchestrator.model.overlays", fromlist=["ALGORITHMS"]).ALGORITHMS))
    p.add_argument("--compare", action="store_true", help="run every algorithm on the same workloads")
    p.add_argument("--nodes", type=int, default=200)
    p.add_argument("--topics", type=int, default=100)
    p.add_argument("--subscriptions", type=int, default=10, help="topics per node (Zipf model)")
    p.add_argument("--zipf", type=float, default=0.5, help="Zipf exponent of topic popularity")
    p.add_argument("--interest", type=float, help="uniform interest rate instead of Zipf (Topiary's model)")
    p.add_argument("--degree", type=int, default=8, help="random and degree-split: outgoing links per node")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--diameter", action="store_true", help="also the largest per-topic diameter (slow)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", "-v", action="store_true", help="progress per run and algorithm")
    p.set_defaults(func=cmd_overlay)


def cmd_overlay(args: argparse.Namespace) -> int:
    from orchestrator.model.overlays import ALGORITHMS
    from orchestrator.model.overlays.experiment import Workload, format_table, run_experiment, to_json

    algorithms = list(ALGORITHMS) if args.compare else [args.algorithm]
    if args.nodes > 1500 and "complete" in algorithms:
        algorithms.remove("complete")
        err.print("complete left out above 1500 nodes (it is every pair)")
    if args.interest is None and not 0 < args.subscriptions <= args.topics:
        raise UsageError(f"--subscriptions must be between 1 and --topics ({args.topics})")
    if args.interest is not None and not 0 < args.interest <= 1:
        raise UsageError("--interest is a probability in (0, 1]")
    if args.nodes < 2 or args.topics < 1 or args.runs < 1:
        raise UsageError("--nodes >= 2, --topics >= 1 and --runs >= 1")
    wl = Workload(args.nodes, args.topics, args.subscriptions, args.zipf, args.interest)
    progress = (lambda text: err.print(text)) if args.verbose else None
    results = run_experiment(algorithms, wl, args.runs, args.seed, args.degree, args.diameter, progress)
    if args.json:
        print(json.dumps(to_json(results), indent=1))
    else:
        print(format_table(results))
    return 0
