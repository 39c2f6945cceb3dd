"""A real one-node Kubernetes cluster on this machine (`peerlab cluster up | down | status | load`).

    layout      the state directory and the cluster's addresses and ports
    programs    Kubernetes, etcd, CoreDNS, crictl built from pinned Go modules (pins/); containerd,
                runc and the CNI plugins from Debian
    pki         the CA, certificates and kubeconfigs
    components  every process with its flags and configuration files
    daemons     starting, waiting for and stopping those processes
    network     the pods' bridge and iptables rules, and their removal
    images      the sandbox image and the node images imported into containerd
    store       the S3 store in a pod (charts/peerlab-store): SeaweedFS, its keys, its endpoint
    lifecycle   up, down, status
"""
