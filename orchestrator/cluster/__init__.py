"""A real multi-node Kubernetes cluster on this machine, made by kind (`peerlab cluster up | down |
status | load`): one control plane and workers, each a Docker container with its own kubelet and
containerd, flannel's vxlan overlay between them, an S3 store in a pod.

    layout      the state directory, the cluster's names and ranges
    programs    kind, Kubernetes 1.34, etcd, CoreDNS, crictl, flannel built from pinned Go modules (pins/)
    node_image  the kind node image and the control plane's images, built here (no registry)
    node/       what the node image holds besides: containerd's configuration, runc-bounded, flannel
    kind        the cluster's kind configuration, and the `kind` program's calls
    shaper      the shaping daemon (charts/peerlab-shaper): its image, its release on every node
    rt_budget   real-time CPU time for the nodes' delay lines under RT group scheduling (cgroup v1)
    store       the S3 store in a pod (charts/peerlab-store): SeaweedFS, its keys, its endpoint
    lifecycle   up, down, status
"""
