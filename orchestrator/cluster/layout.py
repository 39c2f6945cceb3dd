"""Where the local cluster keeps its files on this host, and its names: one state directory (the
kubeconfig, the kind configuration, the store's data and keys; `down --purge` removes it), the kind
cluster's name, its Docker network, its nodes' names, the pods' and services' ranges.

The state directory is $PEERLAB_CLUSTER_DIR, or /var/lib/peerlab/cluster. May import nothing of peerlab.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NAME = "peerlab"                      # the kind cluster
CONTEXT = f"kind-{NAME}"              # kind's name for its kubeconfig context
NETWORK = "peerlab-kind"              # the nodes' Docker network (kind's own is `kind`): removed at down
CONTROL_PLANE = f"{NAME}-control-plane"
POD_CIDR = "10.244.0.0/16"            # flannel gives each node a /24 of it
SERVICE_CIDR = "10.96.0.0/16"
LABEL = "io.x-k8s.kind.cluster"       # kind's label on its node containers (value: the cluster's name)
STORE_MOUNT = "/var/lib/peerlab-store"  # the store's data inside the control-plane node


def node_names(count: int) -> list[str]:
    """kind's names for a cluster of `count` nodes: the control plane, then peerlab-worker, -worker2..."""
    return [CONTROL_PLANE] + [f"{NAME}-worker{'' if i == 1 else i}" for i in range(1, count)]


@dataclass(frozen=True)
class Layout:
    root: Path

    @classmethod
    def default(cls) -> "Layout":
        return cls(Path(os.environ.get("PEERLAB_CLUSTER_DIR") or "/var/lib/peerlab/cluster"))

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig `up` writes for the user (context kind-peerlab)."""
        return self.root / "kubeconfig"

    @property
    def kind_config(self) -> Path:
        """The kind cluster configuration `up` wrote (kind.config says what it holds)."""
        return self.root / "kind.yaml"

    @property
    def store_data(self) -> Path:
        """The S3 store's objects, on this host (mounted into the control-plane node)."""
        return self.root / "store" / "data"
