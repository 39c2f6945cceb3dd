"""What the local cluster runs, with which flags and configuration: the whole cluster on one page.

    etcd                    127.0.0.1:23790, data in <state>/etcd
    kube-apiserver          :6443, TLS, client certificates, Node + RBAC authorisation
    kube-controller-manager signs service account tokens, runs the StatefulSet and endpoint controllers
    kube-scheduler
    containerd              <state>/containerd/containerd.sock, its CRI plugin; CNI: a bridge (peerlab0,
                            10.244.0.0/16, host-local addresses), Debian's plugins in /usr/lib/cni
    kubelet                 cgroupfs driver on cgroup v1 (failCgroupV1: false), no image garbage
                            collection (every image is imported here: none could be pulled back)
    kube-proxy              iptables mode: the services' cluster IPs (10.96.0.0/16)
    CoreDNS                 on the host, at the bridge's address 10.244.0.1:53: the pods' cluster DNS
                            (<pod>.<service>.<namespace>.svc.cluster.local), the rest forwarded

Each entry is a `Component`: its argv and the files it needs written first. Which program runs is
`programs.locate`'s concern; starting and stopping them is `daemons`'.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from orchestrator.cluster import layout as L
from orchestrator.cluster.layout import Layout


@dataclass
class Component:
    name: str
    argv: list[str]
    files: dict[Path, str] = field(default_factory=dict)   # written before it starts
    ready: str = ""   # how `daemons` knows it is up: "tcp:PORT", "unix:PATH", "https:URL", or "" (started)


def etcd(s: Layout, binary: Path) -> Component:
    client, peer = f"http://127.0.0.1:{L.ETCD_CLIENT_PORT}", f"http://127.0.0.1:{L.ETCD_PEER_PORT}"
    return Component("etcd", [
        str(binary), "--name", "peerlab", "--data-dir", str(s.etcd),
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"peerlab={peer}", "--listen-metrics-urls", "http://127.0.0.1:23810",
        "--log-level", "warn",
    ], ready=f"tcp:{L.ETCD_CLIENT_PORT}")


def apiserver(s: Layout, binary: Path, node_ip: str) -> Component:
    p = s.pki
    return Component("kube-apiserver", [
        str(binary), f"--etcd-servers=http://127.0.0.1:{L.ETCD_CLIENT_PORT}",
        f"--secure-port={L.API_PORT}", f"--advertise-address={node_ip}",
        f"--service-cluster-ip-range={L.SERVICE_CIDR}",
        f"--tls-cert-file={p / 'apiserver-serving.crt'}", f"--tls-private-key-file={p / 'apiserver-serving.key'}",
        f"--client-ca-file={p / 'ca.crt'}",
        f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={p / 'apiserver-kubelet.key'}",
        f"--kubelet-certificate-authority={p / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true", "--profiling=false", "--v=1",
    ], ready=f"https://127.0.0.1:{L.API_PORT}/readyz")


def controller_manager(s: Layout, binary: Path) -> Component:
    p, kc = s.pki, s.kubeconfig_of("kube-controller-manager")
    return Component("kube-controller-manager", [
        str(binary), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={p / 'ca.crt'}",
        f"--cluster-signing-cert-file={p / 'ca.crt'}", f"--cluster-signing-key-file={p / 'ca.key'}",
        "--use-service-account-credentials=true", "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--service-cluster-ip-range={L.SERVICE_CIDR}", "--profiling=false", "--v=1",
    ])


def scheduler(s: Layout, binary: Path) -> Component:
    kc = s.kubeconfig_of("kube-scheduler")
    return Component("kube-scheduler", [
        str(binary), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        "--leader-elect=false", "--bind-address=127.0.0.1", "--profiling=false", "--v=1",
    ])


def containerd(s: Layout, binary: Path, cni_bin: Path) -> Component:
    c = s.containerd
    config = s.config / "containerd.toml"
    toml = f"""version = 2
root = "{c / 'root'}"
state = "{c / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{s.containerd_socket}"

[ttrpc]
  address = "{c / 'containerd.sock.ttrpc'}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{L.PAUSE_IMAGE}"
  enable_selinux = false
  # no lower oom_score_adj than containerd's own: the kubelet asks -998 for sandboxes, which needs
  # CAP_SYS_RESOURCE, and machines like these run root without it (runc then fails with "can't get
  # final child's PID from pipe")
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{s.cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{c / 'runc'}"
"""
    cni = {"cniVersion": "0.4.0", "name": "peerlab", "plugins": [
        {"type": "bridge", "bridge": L.BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(s.cni_state),
                  "ranges": [[{"subnet": L.POD_CIDR, "gateway": L.POD_GATEWAY}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}
    return Component("containerd", [str(binary), "--config", str(config)],
                     files={config: toml, s.cni_conf / "10-peerlab.conflist": json.dumps(cni, indent=1)},
                     ready=f"unix:{s.containerd_socket}")


def kubelet(s: Layout, binary: Path, node_ip: str) -> Component:
    p = s.pki
    config = s.config / "kubelet.yaml"
    settings = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(p / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(p / "kubelet-serving.crt"), "tlsPrivateKeyFile": str(p / "kubelet-serving.key"),
        "containerRuntimeEndpoint": f"unix://{s.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        # Kubernetes 1.34 still runs on cgroup v1 (this kernel's hierarchies) when told to; from 1.35 the
        # default refuses it
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [L.POD_GATEWAY], "clusterDomain": L.CLUSTER_DOMAIN,
        "podLogsDir": str(s.pod_logs),
        "maxPods": 500,
        # every image was imported here and could not be pulled again: never collect them
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "resolvConf": str(s.config / "resolv.conf"),
    }
    # what pods of dnsPolicy Default resolve with: the cluster DNS too, which forwards to the host's
    # resolvers (the host's resolv.conf may name a stub on loopback, which no pod reaches)
    upstream = f"nameserver {L.POD_GATEWAY}\n"
    return Component("kubelet", [
        str(binary), f"--config={config}", f"--kubeconfig={s.kubeconfig_of('kubelet')}",
        f"--root-dir={s.kubelet}", f"--node-ip={node_ip}", f"--hostname-override={L.NODE_NAME}", "--v=1",
    ], files={config: yaml.safe_dump(settings), s.config / "resolv.conf": upstream})


def kube_proxy(s: Layout, binary: Path) -> Component:
    config = s.config / "kube-proxy.yaml"
    settings = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(s.kubeconfig_of("kube-proxy"))},
        "mode": "iptables", "clusterCIDR": L.POD_CIDR, "hostnameOverride": L.NODE_NAME,
        "conntrack": {"maxPerCore": 0},   # leave the host's conntrack table size alone
        "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
    }
    return Component("kube-proxy", [str(binary), f"--config={config}", "--v=1"],
                     files={config: yaml.safe_dump(settings)})


def coredns(s: Layout, binary: Path) -> Component:
    corefile = s.config / "Corefile"
    text = f""".:53 {{
    bind {L.POD_GATEWAY}
    errors
    kubernetes {L.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {s.kubeconfig_of('coredns')} {L.CONTEXT}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 10
}}
"""
    return Component("coredns", [str(binary), "-conf", str(corefile)], files={corefile: text},
                     ready=f"udp:{L.POD_GATEWAY}:53")


# the RBAC of the cluster DNS's user (pki.USERS: coredns): what CoreDNS's kubernetes plugin reads
COREDNS_RULES = [
    {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
]
