"""The `peerlab` command line: one module per group of commands, each adding its parsers.

Exit codes: 0 success, 1 the run failed (the message names the node), 2 the input is invalid
(nothing was touched), 130 interrupted (everything torn down).

May import: anything of peerlab (orchestrator's packages and root modules, node/, analysis/), inside
the command that needs it: at the top of its modules only rich, yaml, orchestrator.spark_on_k8s,
orchestrator.backends' names (TARGETS), orchestrator.model.bounded and node.paths, so that `peerlab
--help` loads little. The top floor: nothing of peerlab imports it (the orchestrator's image and the
tests run `python -m orchestrator.cli`).
"""
from __future__ import annotations

import argparse
import os
import sys

from orchestrator.cli import bench, cluster, contract, fuzz, machine, overlay, report, run, scenario, store, vm
from orchestrator.cli.common import AnalysisInterrupted, UsageError, close_analysis, err

EXAMPLES = """\
examples:
  peerlab run scenarios/quickstart.yaml
  peerlab run scenarios/quickstart.yaml --set nodes.count=10 --set network.latency.one_way=20ms
  peerlab validate my-scenario.yaml
  peerlab plan scenarios/quickstart.yaml --seed 7
  peerlab report runs/20261121-120000-quickstart-1a2b3c
  peerlab run scenarios/sim-gossipsub-1000.yaml --backend sim   # 1000 nodes in virtual time
  peerlab run scenarios/gossipsub-large.yaml --matrix gossipsub.variant=v1.1,v1.2,all-3
                           # one run per variant, then one comparison table
  peerlab compare runs/A runs/B      # metrics side by side
  peerlab cluster up       # (as root) a local 3-node Kubernetes cluster (kind) for --backend kubernetes
  peerlab store serve      # the bundled S3 server (SeaweedFS) for output.store: s3://peerlab/runs
  peerlab overlay --compare --nodes 1000 --runs 10   # the CD-MAX seed's overlay tables
  peerlab clean            # remove what a crashed run left behind
  peerlab doctor           # what this machine can run
  peerlab vm run -- .venv/bin/python -m pytest -m netem   # the netem path in a Debian guest (no netem here)
  peerlab run scenarios/gossipsub-implementations.yaml   # peerlab's GossipSub beside go's, rust's, js's, py's
  peerlab run scenarios/gossipsub-mixed.yaml             # go, rust, js and py libp2p nodes in one network
  peerlab contract implementations   # the node implementations (adapters) and their install state

scenario reference: `peerlab schema` prints the JSON Schema (point your editor's YAML plugin at it);
docs/scenarios.md walks through every section, docs/reference/scenario.md lists every field.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="peerlab", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES,
        description="Emulation testbed for peer-to-peer publish/subscribe protocols: real nodes in "
                    "network namespaces, every link shaped with tc, logs analysed with PySpark.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in (run, scenario, machine, report, store, cluster, bench, overlay, fuzz, contract, vm):
        group.add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from orchestrator.model.scenario import ScenarioError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ScenarioError as e:
        err.print(str(e), markup=False, highlight=False)
        return 2
    except UsageError as e:
        from orchestrator.model.bounded import refusal_lines

        err.print("error: " + "\n".join(refusal_lines(str(e).split("\n"))), markup=False, highlight=False)
        return 2
    except AnalysisInterrupted as e:
        err.print(f"interrupted: {e}", markup=False, highlight=False)
        return 130
    except KeyboardInterrupt:
        err.print("interrupted: run torn down")
        return 130
    except BrokenPipeError:  # `peerlab schema | head`: the reader had what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


def cli() -> int:
    """The `peerlab` command: `main`, then the analysis's JVM let go as the process exits. Only
    here: a program calling `main` keeps its own Spark session."""
    try:
        return main()
    finally:
        close_analysis()
