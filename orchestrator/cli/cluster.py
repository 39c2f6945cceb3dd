"""`peerlab cluster`: the local multi-node Kubernetes cluster (orchestrator/cluster, made by kind): up,
down, status, load (an image built here into its nodes)."""
from __future__ import annotations

import argparse
import json
import sys

from orchestrator.cli.common import add_command, err, said

DESCRIPTION = """
A real Kubernetes 1.34 cluster of several nodes on this machine, for --backend kubernetes where no
other cluster is at hand, made the way users make one: by kind. Each cluster node is a Docker
container with its own systemd, containerd and kubelet (one control plane, the rest workers); pods on
different nodes talk through flannel's vxlan overlay. No registry is needed: kind, Kubernetes and
flannel are built from their pinned Go modules, the node image and the control plane's images by the
Docker engine here, and peerlab's node images are loaded into every node (`kind load`). An S3 store
runs in a pod (SeaweedFS, the bundled server of `peerlab store serve`) for the runs' logs. The first
`up` on a machine builds everything (many minutes); later ones take about 30 s. Runs as root. Its
files on this host are in one state directory ($PEERLAB_CLUSTER_DIR, default /var/lib/peerlab/cluster).
"""


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "cluster", help="a local multi-node Kubernetes cluster (kind): up, down, status, load",
        description=DESCRIPTION,
        examples=["peerlab cluster up              # as root, 3 nodes; then: export KUBECONFIG=/var/lib/peerlab/cluster/kubeconfig",
                  "peerlab cluster up --nodes 1    # one node: the control plane runs the pods too",
                  ". /var/lib/peerlab/cluster/store/credentials.env   # the store's endpoint and keys, for:",
                  "peerlab run scenarios/quickstart.yaml --backend kubernetes --set output.store=s3://peerlab/runs",
                  "peerlab cluster status          # what runs, the node's condition, leftovers",
                  "peerlab cluster load my-node:dev   # an image of yours, from the Docker engine",
                  "peerlab cluster down --purge    # and its state directory"],
        note="With the cluster up: peerlab run scenarios/quickstart.yaml --backend kubernetes. "
             "docs/backends.md#the-local-cluster says what it runs and how it differs from a multi-node cluster.")
    csub = p.add_subparsers(dest="cluster_command", required=True, metavar="{up,down,status,load}")
    u = csub.add_parser("up", help="create the cluster (building its programs and node image the first time) "
                                   "and load the node images the Docker engine has",
                        description="Create the kind cluster peerlab (unless it is up with as many nodes), wait "
                                    "until every node is Ready, load peerlab's node images (and --load ones) "
                                    "into every node, start the S3 store (release peerlab-store: SeaweedFS on "
                                    "the control-plane node, its data under the state directory, reached at "
                                    "that node's address, port 30833, bucket peerlab; its keys in "
                                    "store/credentials.env there), and print the kubeconfig to export.")
    u.add_argument("--nodes", type=int, default=3, metavar="N",
                   help="cluster nodes: one control plane and N-1 workers; every node runs pods (default 3)")
    u.add_argument("--load", action="append", default=[], metavar="IMAGE",
                   help="also import this Docker image (repeatable)")
    u.add_argument("--no-store", action="store_true",
                   help="without the S3 store (runs then store to file:// or an S3 endpoint of yours)")
    u.set_defaults(func=cmd_up)
    d = csub.add_parser("down", help="delete the cluster and everything it made outside its state directory",
                        description="`kind delete cluster`: the node containers and their volumes, and with them "
                                    "every pod, mount, cgroup, veth and iptables rule inside them; then the "
                                    "nodes' Docker network. The state directory (the store's data and keys) "
                                    "stays for the next up, unless --purge.")
    d.add_argument("--purge", action="store_true", help="remove the state directory too")
    d.set_defaults(func=cmd_down)
    s = csub.add_parser("status", help="the nodes, whether each is Ready, the store, and any leftovers")
    s.add_argument("--json", action="store_true", help="print it as JSON")
    s.set_defaults(func=cmd_status)
    ld = csub.add_parser("load", help="load images from the Docker engine into every node of the running cluster",
                         description="`kind load docker-image` of each IMAGE (a tag the Docker engine has) "
                                     "into every node; one every node has already: skipped.")
    ld.add_argument("images", nargs="+", metavar="IMAGE")
    ld.set_defaults(func=cmd_load)


def _say(text: str) -> None:
    err.print(text, markup=False, highlight=False)


def cmd_up(args: argparse.Namespace) -> int:
    from orchestrator.cluster import lifecycle
    from orchestrator.cluster.layout import Layout

    try:
        lifecycle.up(Layout.default(), nodes=args.nodes, say=_say, load=args.load, with_store=not args.no_store)
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
        print(f"{'kind cluster':24} {st['cluster'] or 'none'} ({len(st['containers'])} node containers)")
        print(f"{'API server':24} {'ready' if st['api_ready'] else 'not answering'}")
        for node, ready in st["nodes"].items():
            print(f"{node:24} {'Ready' if ready == 'True' else 'not Ready: ' + ready}")
        if st["kubeconfig"]:
            print(f"{'kubeconfig':24} {st['kubeconfig']}")
        if st["store"]:
            print(f"{'S3 store':24} {st['store']['endpoint']} "
                  f"{'takes writes' if st['store']['answers'] else 'not answering'}; settings: {st['store']['settings']}")
        for left in st["leftovers"]:
            print(f"{'left over':24} {left}")
    return 0 if st["nodes_ready"] else 1


def cmd_load(args: argparse.Namespace) -> int:
    from orchestrator.cluster import kind

    if not kind.exists():
        err.print("[bold red]error:[/] the local cluster is not up (peerlab cluster up)", highlight=False)
        return 1
    try:
        done = kind.load(args.images, say=_say)
    except kind.KindError as e:
        err.print(f"[bold red]error:[/] {said(e)}", highlight=False)
        return 1
    print(f"imported {len(done)}, {len(args.images) - len(done)} already there", file=sys.stderr)
    return 0
