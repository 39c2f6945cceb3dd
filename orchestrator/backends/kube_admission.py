"""Admission on the kubernetes backend: what the run's pods ask for (one pod per node, its container's
requests and limits from charts/peerlab/values.yaml) against what the cluster lets the run's
namespace have: every ResourceQuota's hard minus used (pods, requests.cpu, requests.memory,
limits.memory, and the `cpu`/`memory` short forms), and the schedulable nodes' allocatable CPU,
memory and pods. Pods of other namespaces are not counted against the allocatable: the quota is the
namespace's own figure, the allocatable an upper bound.

Cluster nodes that share one kernel (kind's nodes on one machine: the same `nodeInfo.bootID`) each
report that machine's CPUs and memory as their own; they are one machine's worth, counted once
(the largest of their figures), while their pod slots add up.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml

from node.paths import ROOT

VALUES = ROOT / "charts" / "peerlab" / "values.yaml"
CONTAINERS = ("node",)
# quota keys -> what one pod needs of them; `cpu` and `memory` in a quota mean the requests
QUOTA_KEYS = {"pods": "pods", "requests.cpu": "cpu", "cpu": "cpu", "requests.memory": "memory",
              "memory": "memory", "limits.memory": "limits.memory"}
UNITS = {"pods": "", "cpu": " cores", "memory": " MiB", "limits.memory": " MiB"}


def quantity(text: Any) -> Decimal:
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(str(text)))


CPU_REQUEST_ENV = "PEERLAB_K8S_CPU_REQUEST"


def node_resources() -> dict[str, Any]:
    """The chart's `resources` for a run's pods: values.yaml's, with $PEERLAB_K8S_CPU_REQUEST (e.g.
    10m) as the node container's CPU request where set. The chart's 50m is sized for nodes at full
    speed; a dilated run's nodes each need a fraction of that, and 100 of them at 50m would ask the
    scheduler for 5 cores (the backend's values and admission read this one figure)."""
    resources = yaml.safe_load(VALUES.read_text())["resources"]
    cpu = os.environ.get(CPU_REQUEST_ENV)
    if cpu:
        try:
            if quantity(cpu) <= 0:
                raise ValueError
        except (ValueError, ArithmeticError):
            raise RuntimeError(f"{CPU_REQUEST_ENV}={cpu!r} is not a CPU quantity above 0 (e.g. 10m, 0.01)") from None
        resources["node"].setdefault("requests", {})["cpu"] = cpu
    return resources


def pod_needs(values: dict[str, Any] | None = None) -> dict[str, float]:
    """One node's pod: requests (CPU in cores, memory in MiB) and memory limit, summed over its
    containers, from the chart's values (else the run's: `node_resources`)."""
    resources = values["resources"] if values else node_resources()
    need = {"pods": 1.0, "cpu": 0.0, "memory": 0.0, "limits.memory": 0.0}
    for name in CONTAINERS:
        spec = resources.get(name, {})
        requests, limits = spec.get("requests", {}), spec.get("limits", {})
        need["cpu"] += float(quantity(requests.get("cpu", 0)))
        need["memory"] += float(quantity(requests.get("memory", 0))) / 2**20
        need["limits.memory"] += float(quantity(limits.get("memory", 0))) / 2**20
    return need


@dataclass
class Room:
    """What the namespace may still take: by quota (name -> key -> left) and the cluster's allocatable."""
    namespace: str
    quota_left: dict[str, dict[str, float]] = field(default_factory=dict)
    allocatable: dict[str, float] = field(default_factory=dict)
    machines: int = 0  # kernels the schedulable nodes run on


def _amount(key: str, value: Any) -> float:
    q = float(quantity(value))
    return q / 2**20 if "memory" in key else q


def cluster_room(namespace: str, context: str | None, timeout: float = 5.0) -> Room:
    """Read the quotas and the nodes (RuntimeError if the cluster cannot be asked)."""
    from kubernetes import client

    from orchestrator.backends.kube_config import client_config

    try:
        api = client.CoreV1Api(client.ApiClient(client_config(context)))  # in the cluster too (the experiment Job)
        quotas = api.list_namespaced_resource_quota(namespace, _request_timeout=timeout).items
        nodes = api.list_node(_request_timeout=timeout).items
    except Exception as err:  # noqa: BLE001 - no kubeconfig, no server, no permission: said by the caller
        raise RuntimeError(str(err).splitlines()[0][:200] or err.__class__.__name__) from None
    room = Room(namespace)
    for q in quotas:
        hard, used = (q.status.hard or {}), (q.status.used or {})
        left = {k: _amount(k, hard[k]) - _amount(k, used.get(k, 0)) for k in hard if k in QUOTA_KEYS}
        if left:
            room.quota_left[q.metadata.name] = left
    machines: dict[str, dict[str, float]] = {}  # kernel (boot id, else the node) -> its CPUs and memory
    for node in nodes:
        if node.spec and node.spec.unschedulable:
            continue
        info = node.status.node_info
        kernel = (info.boot_id if info and info.boot_id else "") or node.metadata.name
        for key in ("cpu", "memory", "pods"):
            value = (node.status.allocatable or {}).get(key)
            if value is None:
                continue
            if key == "pods":
                room.allocatable[key] = room.allocatable.get(key, 0.0) + _amount(key, value)
            else:
                machine = machines.setdefault(kernel, {})
                machine[key] = max(machine.get(key, 0.0), _amount(key, value))
    for machine in machines.values():
        for key, value in machine.items():
            room.allocatable[key] = room.allocatable.get(key, 0.0) + value
    room.machines = len(machines)
    return room


def problems(nodes: int, per_pod: dict[str, float], room: Room) -> tuple[list[str], int]:
    """What does not fit, each with its figures, and the largest node count that does."""
    found, fit = [], nodes
    limits = [(f"quota {name} of namespace {room.namespace}", key, QUOTA_KEYS[key], left)
              for name, quota in room.quota_left.items() for key, left in quota.items()]
    limits += [("the cluster's schedulable nodes (allocatable)", key, key, left) for key, left in room.allocatable.items()]
    for where, key, need_key, left in limits:
        each = per_pod[need_key]
        if each <= 0:
            continue
        fits = max(0, int(left / each + 1e-9))
        fit = min(fit, fits)
        if nodes * each > left + 1e-9:
            found.append(f"{key}: {nodes * each:.6g}{UNITS[need_key]} needed ({each:.6g} per pod), "
                         f"{max(left, 0):.6g} left in {where}")
    return found, fit
