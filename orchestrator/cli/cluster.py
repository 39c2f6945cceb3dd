"""`peerlab cluster`: the local one-node Kubernetes cluster (orchestrator/cluster): up, down, status,
load (import an image built here into it)."""
from __future__ import annotations

import argparse
import json
import sys

from orchestrator.cli.common import add_command, err, said

DESCRIPTION = """
A real one-node Kubernetes 1.34 cluster on this machine, for --backend kubernetes where no other
cluster is at hand: etcd, kube-apiserver (TLS, RBAC), controller-manager, scheduler, containerd with
a CNI bridge, kubelet, kube-proxy and CoreDNS, all processes on the host (no VM, no registry: the
images the pods run are imported from the Docker engine), and an S3 store in a pod (SeaweedFS, the
bundled server of `peerlab store serve`) for the runs' logs. The first `up` on a machine builds the
programs from their pinned Go modules (many minutes); later ones start in seconds. Runs as root.
Everything is kept in one state directory ($PEERLAB_CLUSTER_DIR, default /var/lib/peerlab/cluster).
"""


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "cluster", help="a local one-node Kubernetes cluster: up, down, status, load",
        description=DESCRIPTION,
        examples=["peerlab cluster up              # as root; then: export KUBECONFIG=/var/lib/peerlab/cluster/kubeconfig",
                  ". /var/lib/peerlab/cluster/store/credentials.env   # the store's endpoint and keys, for:",
                  "peerlab run scenarios/quickstart.yaml --backend kubernetes --set output.store=s3://peerlab/runs",
                  "peerlab cluster status          # what runs, the node's condition, leftovers",
                  "peerlab cluster load my-node:dev   # an image of yours, from the Docker engine",
                  "peerlab cluster down --purge    # and its state directory"],
        note="With the cluster up: peerlab run scenarios/quickstart.yaml --backend kubernetes. "
             "docs/backends.md#the-local-cluster says what it runs and how it differs from a multi-node cluster.")
    csub = p.add_subparsers(dest="cluster_command", required=True, metavar="{up,down,status,load}")
    u = csub.add_parser("up", help="start the cluster (building its programs the first time) and import the "
                                   "node images the Docker engine has",
                        description="Start every component not running yet, wait until the node is Ready, "
                                    "import peerlab's node images (and --load ones) into its container runtime, "
                                    "start the S3 store (release peerlab-store: SeaweedFS, its data under the "
                                    "state directory, reached at the node's address, port 30833, bucket "
                                    "peerlab; its keys in store/credentials.env there), and print the "
                                    "kubeconfig to export.")
    u.add_argument("--load", action="append", default=[], metavar="IMAGE",
                   help="also import this Docker image (repeatable)")
    u.add_argument("--no-store", action="store_true",
                   help="without the S3 store (runs then store to file:// or an S3 endpoint of yours)")
    u.set_defaults(func=cmd_up)
    d = csub.add_parser("down", help="stop the cluster and remove everything it made outside its state directory",
                        description="Remove the pods' sandboxes, stop every component, unmount, remove the "
                                    "bridge, the iptables rules and chains, the pods' cgroups and network "
                                    "namespaces. The state directory (certificates, etcd's data, the images) "
                                    "stays for the next up, unless --purge.")
    d.add_argument("--purge", action="store_true", help="remove the state directory too")
    d.set_defaults(func=cmd_down)
    s = csub.add_parser("status", help="what runs, whether the node is Ready, and any leftovers")
    s.add_argument("--json", action="store_true", help="print it as JSON")
    s.set_defaults(func=cmd_status)
    ld = csub.add_parser("load", help="import images from the Docker engine into the running cluster",
                         description="Import each IMAGE (a tag the Docker engine has) into the cluster's "
                                     "container runtime, as `kind load docker-image` does; already there: skipped.")
    ld.add_argument("images", nargs="+", metavar="IMAGE")
    ld.set_defaults(func=cmd_load)


def _say(text: str) -> None:
    err.print(text, markup=False, highlight=False)


def cmd_up(args: argparse.Namespace) -> int:
    from orchestrator.cluster import lifecycle
    from orchestrator.cluster.layout import Layout

    try:
        lifecycle.up(Layout.default(), say=_say, load=args.load, with_store=not args.no_store)
    except lifecycle.ClusterError as e:
        err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
        return 1
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from orchestrator.cluster import lifecycle
    from orchestrator.cluster.layout import Layout

    try:
        lifecycle.down(Layout.default(), purge=args.purge, say=_say)
    except lifecycle.ClusterError as e:
        err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
        return 1
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from orchestrator.cluster import lifecycle
    from orchestrator.cluster.layout import Layout

    st = lifecycle.status(Layout.default())
    if args.json:
        print(json.dumps(st, indent=1))
    else:
        for name, pid in st["processes"].items():
            print(f"{name:24} {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
        print(f"{'API server':24} {'ready' if st['api_ready'] else 'not answering'}")
        print(f"{'node':24} {'Ready' if st['node_ready'] else 'not Ready: ' + st['node']}")
        if st["kubeconfig"]:
            print(f"{'kubeconfig':24} {st['kubeconfig']}")
        if st["store"]:
            print(f"{'S3 store':24} {st['store']['endpoint']} "
                  f"{'takes writes' if st['store']['answers'] else 'not answering'}; settings: {st['store']['settings']}")
        for left in st["leftovers"]:
            print(f"{'left over':24} {left}")
    return 0 if st["node_ready"] else 1


def cmd_load(args: argparse.Namespace) -> int:
    from orchestrator.cluster import daemons, images, programs
    from orchestrator.cluster.layout import Layout

    s = Layout.default()
    if not daemons.pid_of(s, "containerd"):
        err.print("[bold red]error:[/] the local cluster is not up (peerlab cluster up)", highlight=False)
        return 1
    try:
        done = images.load(s, programs.locate(build=False)["ctr"], args.images, say=_say)
    except (images.ImageError, programs.MissingProgram) as e:
        err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
        return 1
    print(f"imported {len(done)}, {len(args.images) - len(done)} already there", file=sys.stderr)
    return 0
