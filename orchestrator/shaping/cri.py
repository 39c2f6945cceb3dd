"""Pods' network namespaces on this cluster node, found through the container runtime's CRI with
crictl ($CONTAINER_RUNTIME_ENDPOINT): each pod's ready sandbox, and the network namespace file its
runtime spec names. Run by the shaping daemon (charts/peerlab-shaper) for a run's orchestrator:

    python -m orchestrator.shaping.cri --namespace NS POD...   ->  {"POD": "/var/run/netns/cni-...", ...}

A pod without a ready sandbox here, or whose sandbox is not a peerlab run's (no `peerlab.run` label),
is an error naming it: the daemon enters no other pod. May import nothing of peerlab.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys


def _crictl(*args: str) -> str:
    done = subprocess.run(["crictl", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"crictl {' '.join(args)}: {done.stderr.strip()[-300:]}")
    return done.stdout


def netns_of(namespace: str, pod: str) -> str:
    ids = _crictl("pods", "--namespace", f"^{namespace}$", "--name", f"^{pod}$", "--state", "ready", "-q").split()
    if len(ids) != 1:
        raise RuntimeError(f"pod {namespace}/{pod}: {len(ids)} ready sandboxes on this node (expected 1)")
    found = json.loads(_crictl("inspectp", ids[0]))
    if "peerlab.run" not in (found["status"].get("labels") or {}):
        raise RuntimeError(f"pod {namespace}/{pod} is not a peerlab run's (no peerlab.run label): not entered")
    spec = found["info"]["runtimeSpec"]
    for ns in spec["linux"]["namespaces"]:
        if ns.get("type") == "network" and ns.get("path"):
            return ns["path"]
    raise RuntimeError(f"pod {namespace}/{pod}: its sandbox names no network namespace file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.shaping.cri", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("pods", nargs="+")
    args = parser.parse_args(argv)
    try:
        print(json.dumps({pod: netns_of(args.namespace, pod) for pod in args.pods}))
    except (RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired) as err:
        print(f"cri: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
