"""The shaper entry point: in a node's sandbox container (docker), or in a cluster node's shaping
daemon (charts/peerlab-shaper), which enters each pod's network namespace.

    python -m orchestrator.shaping < ops.json    run shaping operations (a JSON list, see
                                                orchestrator/shaping/ops.py `to_wire`) in this network
                                                namespace; print what was done as one JSON line
    python -m orchestrator.shaping --ops JSON    the same, the list given as an argument
    python -m orchestrator.shaping --serve       the shaper agent: one JSON request per line, one answer
                                                per line, until stdin closes (agent.py)
    python -m orchestrator.shaping --hold        keep the container alive until SIGTERM (the node's
                                                sandbox container, the shaping daemon's pod)

The orchestrator reaches it with `docker exec` or the Kubernetes exec API: the tc code that runs is
the same module the local backend calls directly.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys

from pyroute2 import IPRoute

from orchestrator.shaping import agent, ops, tc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.shaping", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="the operations as a JSON list (default: read from stdin)")
    parser.add_argument("--serve", action="store_true", help="answer requests a line at a time (the shaper agent)")
    parser.add_argument("--hold", action="store_true", help="hold the network namespace until SIGTERM")
    args = parser.parse_args(argv)
    if args.hold:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            signal.pause()
    if args.serve:
        return agent.serve()
    try:
        todo = ops.from_wire(json.loads(args.ops) if args.ops else json.load(sys.stdin))
        with IPRoute() as ipr:
            done = tc.apply(ipr, todo)
    except Exception as err:  # the caller shows this line; the traceback helps nobody there
        print(json.dumps({"error": f"{err.__class__.__name__}: {err}"}))
        return 1
    print(json.dumps(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
