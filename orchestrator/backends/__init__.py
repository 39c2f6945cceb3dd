"""Backends by name: where nodes run. `local` (network namespaces) is the default; `docker` runs
each node in a container; `kubernetes` each node in a pod of the peerlab chart. A backend's module is
imported only when a run asks for it.

May import: shaping, control, store, record, builds, model, the orchestrator's own modules (procfs,
helm) and node/; never run/ or cli/ (the floors above). shaping/ and control/ declare what they need
of a backend (mechanisms.ShapingBackend, contract_client.ContractBackend) and import nothing of here;
builds/ takes helm's path from orchestrator/helm.py, not from kube_cluster."""
from __future__ import annotations

from .base import Backend, RunContext
from .local import LocalBackend

BACKENDS = ("local", "docker", "kubernetes")


def get_backend(name: str) -> type[Backend]:
    if name == "local":
        return LocalBackend
    if name == "docker":
        from .docker import DockerBackend
        return DockerBackend
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend
        return KubernetesBackend
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "get_backend", "Backend", "RunContext"]
