"""Pods' network namespaces on this cluster node, found through the container runtime's CRI with
crictl ($CONTAINER_RUNTIME_ENDPOINT): each pod's ready sandbox, and the network namespace file its
runtime spec names. Asked by the shaper agent (agent.py) of the shaping daemon (charts/peerlab-shaper)
for a run's orchestrator: `netns_of(NS, [POD, ...])` -> {"POD": "/var/run/netns/cni-...", ...}.

A pod without a ready sandbox here, or whose sandbox is not a peerlab run's (no `peerlab.run` label),
is an error naming it: the daemon enters no other pod. May import nothing of peerlab.
"""
from __future__ import annotations

import json
import subprocess

CALL_TIMEOUT = 25  # seconds for one crictl call (two make a request, whose answer the agent's caller waits 60 s for)


def _crictl(*args: str) -> str:
    done = subprocess.run(["crictl", *args], capture_output=True, text=True, timeout=CALL_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"crictl {' '.join(args)}: {done.stderr.strip()[-300:]}")
    return done.stdout


def netns_of(namespace: str, pods: list[str]) -> dict[str, str]:
    """Each pod's network namespace file, in two calls to the runtime however many pods (a call is a
    process and a round trip: 30 pods, two calls each, were 5 s of a run's start-up on 2 cores)."""
    if not pods:
        return {}  # (inspectp without an ID would inspect every sandbox here)
    listed = json.loads(_crictl("pods", "--namespace", f"^{namespace}$", "--state", "ready", "-o", "json"))
    ids: dict[str, list[str]] = {}
    for sandbox in listed.get("items") or []:
        ids.setdefault(sandbox["metadata"]["name"], []).append(sandbox["id"])
    for pod in pods:
        if len(ids.get(pod, [])) != 1:
            raise RuntimeError(f"pod {namespace}/{pod}: {len(ids.get(pod, []))} ready sandboxes on this node "
                               "(expected 1)")
    inspected = json.loads(_crictl("inspectp", *(ids[pod][0] for pod in pods)))
    if isinstance(inspected, dict):  # one sandbox: an object, several: a list
        inspected = [inspected]
    by_id = {found["status"]["id"]: found for found in inspected}
    return {pod: _netns(namespace, pod, by_id[ids[pod][0]]) for pod in pods}


def _netns(namespace: str, pod: str, found: dict) -> str:
    if "peerlab.run" not in (found["status"].get("labels") or {}):
        raise RuntimeError(f"pod {namespace}/{pod} is not a peerlab run's (no peerlab.run label): not entered")
    spec = found["info"]["runtimeSpec"]
    for ns in spec["linux"]["namespaces"]:
        if ns.get("type") == "network" and ns.get("path"):
            return ns["path"]
    raise RuntimeError(f"pod {namespace}/{pod}: its sandbox names no network namespace file")
