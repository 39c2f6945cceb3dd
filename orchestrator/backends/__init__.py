"""Backends by name: where nodes run. `local` (network namespaces) is the default; `docker` runs
each node in a container; `kubernetes` each node in a pod of the peerlab chart. A backend's module is
imported only when a run asks for it. The names `peerlab run --backend` takes (TARGETS) are declared
here too: the three backends and `sim`, the simulator (orchestrator/sim), which is not a Backend.

May import: shaping, control, store, record, builds, model, the orchestrator's own modules (procfs,
helm) and node/; never run/ or cli/ (the floors above). shaping/ and control/ declare what they need
of a backend (mechanisms.ShapingBackend, contract_client.ContractBackend) and import nothing of here;
builds/ takes helm's path from orchestrator/helm.py, not from kube_cluster."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Backend, RunContext

BACKENDS = ("local", "docker", "kubernetes")
SIMULATOR = "sim"  # the protocol cores in virtual time (orchestrator/sim): a run target, not a Backend
TARGETS = (*BACKENDS, SIMULATOR)  # what `peerlab run --backend` and `plan --backend` take


def get_backend(name: str) -> type[Backend]:
    if name == "local":
        from .local import LocalBackend
        return LocalBackend
    if name == "docker":
        from .docker import DockerBackend
        return DockerBackend
    if name == "kubernetes":
        from .kubernetes import KubernetesBackend
        return KubernetesBackend
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")


def __getattr__(name: str) -> Any:
    """Backend and RunContext, imported when first asked for: the names above cost nothing to import
    (the command line's parsers take TARGETS), the backends' code 0.4 s."""
    if name in ("Backend", "RunContext"):
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BACKENDS", "SIMULATOR", "TARGETS", "get_backend", "Backend", "RunContext"]
