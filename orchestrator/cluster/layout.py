"""Where the local cluster keeps everything, and its addresses: one state directory (every file of
the cluster, `down --purge` removes it), the pods' and services' ranges, the ports on the host.

The state directory is $PEERLAB_CLUSTER_DIR, or /var/lib/peerlab/cluster (the cluster runs as root).
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "peerlab-node"
BRIDGE = "peerlab0"              # the pods' bridge (the CNI bridge plugin's)
POD_CIDR = "10.244.0.0/16"
POD_GATEWAY = "10.244.0.1"       # the bridge's address: also where the cluster DNS listens
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"         # the `kubernetes` service
CLUSTER_DOMAIN = "cluster.local"
API_PORT = 6443
ETCD_CLIENT_PORT = 23790         # not etcd's 2379, so as not to meet a user's etcd
ETCD_PEER_PORT = 23800
NAMESPACE = "k8s.io"             # containerd's namespace for the CRI
PAUSE_IMAGE = "peerlab.local/pause:1"
CONTEXT = "peerlab"


def node_ip() -> str:
    """The host's address on its default route (the node's InternalIP; the API server advertises it).
    A UDP socket's connect sends nothing: it only picks the route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


@dataclass(frozen=True)
class Layout:
    root: Path

    @classmethod
    def default(cls) -> "Layout":
        return cls(Path(os.environ.get("PEERLAB_CLUSTER_DIR") or "/var/lib/peerlab/cluster"))

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        """Pid files of the cluster's processes."""
        return self.root / "run"

    @property
    def etcd(self) -> Path:
        return self.root / "etcd"

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_state(self) -> Path:
        """host-local's address leases."""
        return self.root / "cni" / "ipam"

    @property
    def config(self) -> Path:
        """Configuration files written at `up` (containerd, kubelet, kube-proxy, CoreDNS)."""
        return self.root / "config"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig `up` writes for the user (context `peerlab`)."""
        return self.root / "kubeconfig"

    def kubeconfig_of(self, user: str) -> Path:
        return self.pki / f"{user}.kubeconfig"

    def dirs(self) -> list[Path]:
        return [self.pki, self.logs, self.run, self.etcd, self.containerd, self.kubelet, self.pod_logs,
                self.cni_conf, self.cni_state, self.config]
