"""`peerlab cluster up | down | status`: the local multi-node cluster, made by kind from the node image
built here, checked, and taken down leaving nothing behind but its state directory (and not that with
`down --purge`).

    up       programs (built once) -> the node image (built once per change, node_image.py) -> kind
             create (one control plane, N-1 workers, flannel's vxlan overlay between them) -> every
             node schedules pods (the control plane's taint lifted: the scenario's pods spread over
             all N) -> an RT budget for each node's delay line where the kernel needs one
             (rt_budget.py) -> every congestion control of the kernel the nodes share allowed in
             namespaces (a run's daemon sets the scenario's in each pod) -> peerlab's node images
             loaded -> the shaping daemon on every node (shaper.py) -> the S3 store in a pod
             (store_release.py); writes <state>/kubeconfig (context kind-peerlab) and <state>/store/credentials.env
    down     kind delete (the node containers and their volumes, with every pod, mount, cgroup,
             veth and iptables rule inside them), Docker's RT budget as it was, then the nodes'
             Docker network
    status   the nodes' containers, the API server, each node's condition, the store, leftovers

May import: orchestrator.cluster (kind, node_image, programs, rt_budget, shaper, store_release, layout),
orchestrator.builds, orchestrator.shaping.tcp_settings (the kernel's congestion controls), node.adapters (the
implementations whose images are loaded).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from orchestrator.cluster import kind, node_image, programs, rt_budget, shaper, store_release
from orchestrator.cluster import layout as L
from orchestrator.cluster.layout import Layout
from orchestrator.shaping import tcp_settings

DEFAULT_NODES = 3
CAPABILITY_HINT = (
    "root here lacks a capability (CapBnd in /proc/self/status), so runc refuses Docker's --privileged "
    "containers, which kind's nodes are. Make peerlab's bounded runc dockerd's default runtime: copy "
    "orchestrator/cluster/node/runc-bounded to /usr/local/libexec/peerlab/runc-bounded, put "
    '{"runtimes": {"bounded": {"path": "/usr/local/libexec/peerlab/runc-bounded"}}, "default-runtime": "bounded"} '
    "in /etc/docker/daemon.json and restart dockerd (it stops its containers); CI's .ci/docker does it with flags")


class ClusterError(RuntimeError):
    """The cluster could not be brought up or down; the message says what failed and where to look."""


def _api(s: Layout):
    from kubernetes import client, config
    return client.ApiClient(config.new_client_from_config(str(s.kubeconfig)).configuration)


def nodes_ready(s: Layout) -> dict[str, str]:
    """Each registered node's Ready condition ("True", or why not); empty when the API does not answer."""
    from kubernetes import client
    try:
        items = client.CoreV1Api(_api(s)).list_node(_request_timeout=5).items
    except Exception:  # noqa: BLE001 - no kubeconfig, or the API is down
        return {}
    found = {}
    for node in items:
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        found[node.metadata.name] = "True" if ready and ready.status == "True" else (ready.message if ready else "no Ready condition")
    return found


def _lift_control_plane_taint(s: Layout) -> None:
    """kind keeps pods off a multi-node cluster's control plane; here every node runs the scenario's."""
    from kubernetes import client
    core = client.CoreV1Api(_api(s))
    node = core.read_node(L.CONTROL_PLANE, _request_timeout=10)
    taints = [t for t in node.spec.taints or [] if t.key != "node-role.kubernetes.io/control-plane"]
    if len(taints) != len(node.spec.taints or []):
        core.patch_node(L.CONTROL_PLANE, {"spec": {"taints": [t.to_dict() for t in taints] or None}},
                        _request_timeout=10)


def node_images() -> list[str]:
    """The node images of this checkout that the Docker engine has (`peerlab image build` makes them),
    and its orchestrator's (`peerlab image build --orchestrator`, for a run inside the cluster)."""
    from node.adapters import IMPLEMENTATIONS
    from orchestrator.builds import orchestrator_image
    from orchestrator.builds.node_image import image_tag
    tags = [image_tag(implementation=i) for i in IMPLEMENTATIONS] + [orchestrator_image.image_tag()]
    return [t for t in tags if node_image.has(t)]


def _lacks_capabilities() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
            return int(line.split()[1], 16) != (1 << (last + 1)) - 1
    return False


def _preflight() -> None:
    done = subprocess.run(["docker", "info", "--format", "{{.DefaultRuntime}}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError("the local cluster's nodes are Docker containers (kind), and no Docker engine answers: "
                           f"{done.stderr.strip()[-300:]} (start dockerd; `.ci/docker` installs and starts one)")
    if _lacks_capabilities() and done.stdout.strip() != "bounded":
        raise ClusterError(CAPABILITY_HINT)


def up(s: Layout, nodes: int = DEFAULT_NODES, say: Callable[[str], None] = print, load: list[str] | None = None,
       with_store: bool = True) -> None:
    """Bring the cluster of `nodes` nodes up (one already up is kept, if it has as many); load the node
    images Docker has, and `load`; then the bundled S3 store in it (store_release.py) unless not `with_store`."""
    if os.geteuid() != 0:
        raise ClusterError("the local cluster runs as root (Docker's privileged containers): "
                           "run peerlab cluster up with sudo")
    if nodes < 1:
        raise ClusterError(f"--nodes {nodes}: a cluster has at least one node (the control plane)")
    started = time.monotonic()
    _preflight()
    say("programs: built once into ~/.cache/peerlab/bin (the first time on a machine takes many minutes)")
    try:
        image = node_image.build(say)
    except (node_image.NodeImageError, programs.MissingProgram) as err:
        raise ClusterError(str(err)) from None
    try:
        if kind.exists():
            have = kind.node_containers()
            if len(have) != nodes:
                raise ClusterError(f"a cluster of {len(have)} nodes is up ({', '.join(have)}); "
                                   f"`peerlab cluster down` first for one of {nodes}")
            say(f"cluster {L.NAME} is up already ({nodes} nodes)")
        else:
            say(f"creating the kind cluster {L.NAME}: 1 control plane, {nodes - 1} workers, from {image}")
            kind.create(s, nodes, image)
        kind.kubeconfig(s)
    except kind.KindError as err:
        hint = f"\n{CAPABILITY_HINT}" if "unable to apply caps" in str(err) else ""
        raise ClusterError(f"{err}{hint}") from None
    _lift_control_plane_taint(s)
    try:
        granted = rt_budget.grant(s, kind.node_containers())
    except rt_budget.BudgetError as err:
        raise ClusterError(str(err)) from None
    if granted:
        say(f"real-time budget: {granted} us per second for each node's delay line (cgroup v1 with RT group "
            "scheduling here)")
    # the nodes are this kernel's containers: a pod's namespace may choose what its host lists (the daemon
    # sets the scenario's congestion control there, cubic by default); listing one changes no default
    for congestion in tcp_settings.available_congestion():
        tcp_settings.ensure_allowed(congestion)
    deadline = time.monotonic() + 180
    ready = nodes_ready(s)
    while not (len(ready) == nodes and all(v == "True" for v in ready.values())):
        if time.monotonic() > deadline:
            raise ClusterError(f"nodes not Ready after 180 s: {ready}; look with: docker exec {L.CONTROL_PLANE} "
                               "journalctl -u kubelet | tail")
        time.sleep(1)
        ready = nodes_ready(s)
    say(f"nodes Ready: {', '.join(sorted(ready))}")

    def load_node_images() -> None:
        found = node_images()
        if not found:
            say("  no node image of this checkout in the Docker engine: `peerlab image build "
                "--implementation all`, then `peerlab cluster load TAG...` (or up again)")
        kind.load([*found, *(load or [])], say)

    def start_shaper() -> None:
        say("starting the shaping daemon (one per node: charts/peerlab-shaper)")
        shaper.up(s, _api(s), nodes, say)

    def start_store() -> None:
        say("starting the S3 store (SeaweedFS in a pod on the control-plane node)")
        store_release.up(s, _api(s), say)

    # side by side: each loads its own images into the nodes and waits for its own pods
    with ThreadPoolExecutor(3, thread_name_prefix="cluster-up") as pool:
        steps = [pool.submit(step) for step in (load_node_images, start_shaper, *([start_store] if with_store else []))]
    for step in steps:
        err = step.exception()
        if isinstance(err, (kind.KindError, shaper.ShaperError, store_release.StoreError)):
            raise ClusterError(str(err)) from None
        if err is not None:
            raise err
    say(f"cluster up in {time.monotonic() - started:.0f} s; kubeconfig {s.kubeconfig} (context {L.CONTEXT}):\n"
        f"  export KUBECONFIG={s.kubeconfig}")


def _network_exists() -> bool:
    return subprocess.run(["docker", "network", "inspect", L.NETWORK], capture_output=True).returncode == 0


def down(s: Layout, purge: bool = False, say: Callable[[str], None] = print) -> None:
    """Take the cluster down; nothing of it is left outside the state directory (which `purge` removes)."""
    if os.geteuid() != 0:
        raise ClusterError("peerlab cluster down runs as root (it removes Docker containers and networks)")
    try:
        if kind.exists() or kind.node_containers():
            say(f"deleting the kind cluster {L.NAME} ({len(kind.node_containers())} nodes)")
            kind.delete(s)
    except kind.KindError as err:
        raise ClusterError(str(err)) from None
    try:
        if rt_budget.revoke(s):
            say("real-time budget of Docker's containers put back")
    except rt_budget.BudgetError as err:
        raise ClusterError(str(err)) from None
    if _network_exists():
        done = subprocess.run(["docker", "network", "rm", L.NETWORK], capture_output=True, text=True)
        if done.returncode != 0:
            raise ClusterError(f"docker network rm {L.NETWORK}: {done.stderr.strip()}")
        say(f"removed the Docker network {L.NETWORK}")
    s.kubeconfig.unlink(missing_ok=True)
    if purge and s.root.exists():
        shutil.rmtree(s.root)
        say(f"removed {s.root}")


def leftovers() -> list[str]:
    """What a cluster taken down could have left on this host: node containers, their network."""
    left = [f"container {c}" for c in kind.node_containers()]
    return left + ([f"docker network {L.NETWORK}"] if _network_exists() else [])


def status(s: Layout) -> dict[str, Any]:
    """The nodes, whether the API answers and each node is Ready, the store, and what is left over."""
    up_now = kind.exists()
    containers = kind.node_containers()
    ready = nodes_ready(s) if up_now and s.kubeconfig.exists() else {}
    all_ready = bool(ready) and all(v == "True" for v in ready.values())
    return {"state_dir": str(s.root), "cluster": L.NAME if up_now else None, "containers": containers,
            "api_ready": bool(ready), "nodes": ready, "nodes_ready": all_ready,
            "store": {"endpoint": store_release.endpoint(), "answers": store_release.answers(s),
                      "settings": str(store_release.credentials_file(s))}
            if all_ready and store_release.credentials_file(s).exists() else None,
            "kubeconfig": str(s.kubeconfig) if s.kubeconfig.exists() else None,
            "leftovers": [] if up_now else leftovers()}
