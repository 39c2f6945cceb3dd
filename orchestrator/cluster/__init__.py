"""A real multi-node Kubernetes cluster on this machine, made by kind (`peerlab cluster up | down |
status | load`): one control plane and workers, each a Docker container with its own kubelet and
containerd, flannel's vxlan overlay between them, an S3 store in a pod.

    layout         the state directory, the cluster's names and ranges
    programs       kind, Kubernetes 1.34, etcd, CoreDNS, crictl, flannel built from pinned Go modules (pins/)
    node_image     the kind node image and the control plane's images, built here (no registry)
    node/          what the node image holds besides: containerd's configuration, runc-bounded, flannel
    kind           the cluster's kind configuration, and the `kind` program's calls
    shaper         the shaping daemon (charts/peerlab-shaper): its image, its release on every node
    rt_budget      real-time CPU time for the nodes' delay lines under RT group scheduling (cgroup v1)
    store_release  the S3 store's release in a pod (charts/peerlab-store): SeaweedFS, its keys, its endpoint
    lifecycle      up, down, status

May import: orchestrator.builds (the pinned programs, the node images), orchestrator.helm,
orchestrator.store (s3server.py's pin, durable.py's private files), orchestrator.shaping.tcp_settings,
node.paths and node.adapters, kubernetes, yaml and boto3; orchestrator.backends only inside a function
(docker_client, the Pod Security level of kube_cluster.py); never run/ or cli/. It is imported by
cli/, tools/ (doctor) and spark_on_k8s.py.
"""
