"""`peerlab cluster up | down | status`: the local one-node cluster brought up in order, checked, and
taken down leaving nothing behind but its state directory (and not that with `down --purge`).

    up       programs (built once) -> certificates -> the pods' bridge -> etcd -> kube-apiserver ->
             controller-manager, scheduler -> CoreDNS -> containerd (+ images) -> kubelet (node Ready)
             -> kube-proxy -> the S3 store in a pod (store.py); writes <state>/kubeconfig (context
             `peerlab`) and <state>/store/credentials.env
    down     kube-proxy, kubelet; every pod sandbox removed through the runtime (crictl: their network
             namespaces and veths go with them); containerd and its shims; mounts under the state
             directory; the kubepods cgroups; the network (network.tear_down); the control plane
    status   each process, the API server's readiness, the node's condition, what is left over
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from orchestrator.cluster import components, daemons, images, network, pki, programs, store
from orchestrator.cluster import layout as L
from orchestrator.cluster.layout import Layout

ORDER = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "coredns", "containerd",
         "kubelet", "kube-proxy"]
CGROUP_ROOT = Path("/sys/fs/cgroup")


class ClusterError(RuntimeError):
    """The cluster could not be brought up or down; the message says what failed and where to look."""


def _api(s: Layout):
    from kubernetes import client, config
    return client.ApiClient(config.new_client_from_config(str(s.kubeconfig)).configuration)


def _node_ready(s: Layout) -> tuple[bool, str]:
    from kubernetes import client
    try:
        node = client.CoreV1Api(_api(s)).read_node(L.NODE_NAME, _request_timeout=5)
    except Exception as err:  # noqa: BLE001 - not registered yet, or the API is down
        return False, f"not registered ({err.__class__.__name__})"
    ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
    return (ready is not None and ready.status == "True"), (ready.message if ready else "no Ready condition")


def _coredns_rbac(s: Layout) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    rbac = client.RbacAuthorizationV1Api(_api(s))
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "peerlab:coredns"}, "rules": components.COREDNS_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "peerlab:coredns"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "peerlab:coredns"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": pki.USERS["coredns"][0]}]}
    for create, body in ((rbac.create_cluster_role, role), (rbac.create_cluster_role_binding, binding)):
        try:
            create(body, _request_timeout=10)
        except ApiException as err:
            if err.status != 409:  # exists from an earlier `up`
                raise


def _component(s: Layout, name: str, progs: dict[str, Path], node_ip: str) -> components.Component:
    build = {
        "etcd": lambda: components.etcd(s, progs["etcd"]),
        "kube-apiserver": lambda: components.apiserver(s, progs["kube-apiserver"], node_ip),
        "kube-controller-manager": lambda: components.controller_manager(s, progs["kube-controller-manager"]),
        "kube-scheduler": lambda: components.scheduler(s, progs["kube-scheduler"]),
        "coredns": lambda: components.coredns(s, progs["coredns"]),
        "containerd": lambda: components.containerd(s, progs["containerd"], progs["cni"]),
        "kubelet": lambda: components.kubelet(s, progs["kubelet"], node_ip),
        "kube-proxy": lambda: components.kube_proxy(s, progs["kube-proxy"]),
    }
    return build[name]()


def node_images() -> list[str]:
    """The node images of this checkout that the Docker engine has (`peerlab image build` makes them)."""
    from node.adapters import IMPLEMENTATIONS
    from orchestrator.builds.node_image import image_tag
    tags = [image_tag(implementation=i) for i in IMPLEMENTATIONS]
    return [t for t in tags if images.docker_has(t)]


def up(s: Layout, say: Callable[[str], None] = print, load: list[str] | None = None, with_store: bool = True) -> None:
    """Bring the cluster up (what runs already is kept); import the node images Docker has, and `load`;
    then the bundled S3 store in it (cluster/store.py) unless not `with_store`."""
    if os.geteuid() != 0:
        raise ClusterError("the local cluster runs as root (kubelet, containerd and the pods' network): "
                           "run peerlab cluster up with sudo")
    started = time.monotonic()
    say("programs: built once into ~/.cache/peerlab/bin (the first time on a machine takes many minutes)")
    try:
        progs = programs.locate(build=True)
    except programs.MissingProgram as err:
        raise ClusterError(str(err)) from None
    for d in s.dirs():
        d.mkdir(parents=True, exist_ok=True)
    node_ip = L.node_ip()
    marker = s.pki / "node-ip"
    if marker.exists() and marker.read_text() != node_ip:  # another address: new serving certificates
        shutil.rmtree(s.pki)
        s.pki.mkdir()
    pki.make(s.pki, L.NODE_NAME, node_ip, L.SERVICE_IP, f"https://127.0.0.1:{L.API_PORT}")
    marker.write_text(node_ip)
    shutil.copy(s.kubeconfig_of("admin"), s.kubeconfig)
    network.set_up()
    for name in ORDER:
        component = _component(s, name, progs, node_ip)
        say(f"starting {name}")
        try:
            daemons.start(s, component, timeout=120 if name == "kube-apiserver" else 60)
        except daemons.DaemonError as err:
            raise ClusterError(str(err)) from None
        if name == "kube-apiserver":
            _coredns_rbac(s)
        if name == "containerd":
            try:
                images.build_pause()
                nodes = node_images()
                if not nodes:
                    say("  no node image of this checkout in the Docker engine: `peerlab image build "
                        "--implementation all`, then `peerlab cluster load TAG...` (or up again)")
                images.load(s, progs["ctr"], [L.PAUSE_IMAGE, *nodes, *(load or [])], say)
            except images.ImageError as err:
                raise ClusterError(str(err)) from None
        if name == "kubelet":
            deadline = time.monotonic() + 120
            ready, why = _node_ready(s)
            while not ready and time.monotonic() < deadline:
                time.sleep(1)
                ready, why = _node_ready(s)
            if not ready:
                raise ClusterError(f"the node is not Ready after 120 s ({why}); the kubelet's log "
                                   f"({s.logs / 'kubelet.log'}) ends:\n{daemons.log_tail(s, 'kubelet')}")
    if with_store:
        say("starting the S3 store (SeaweedFS in a pod)")
        try:
            store.up(s, progs["ctr"], _api(s), say)
        except store.StoreError as err:
            raise ClusterError(str(err)) from None
    say(f"cluster up in {time.monotonic() - started:.0f} s; kubeconfig {s.kubeconfig} (context {L.CONTEXT}):\n"
        f"  export KUBECONFIG={s.kubeconfig}")


def _crictl(s: Layout, crictl: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(crictl), "--runtime-endpoint", f"unix://{s.containerd_socket}",
                           "--image-endpoint", f"unix://{s.containerd_socket}", "--timeout", "60s", *args],
                          capture_output=True, text=True)


def _unmount_under(root: Path) -> int:
    """Unmount everything mounted under root, deepest first; how many."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(root) or point.startswith(f"{root}/"):
            mounts.append(point)
    for point in sorted(mounts, key=lambda p: p.count("/"), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    return len(mounts)


def _kubepods_cgroups() -> list[Path]:
    found = []
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / "kubepods"
        if top.is_dir():
            found.append(top)
    return found


def _remove_cgroups() -> int:
    removed = 0
    for top in _kubepods_cgroups():
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()
                removed += 1
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass
    return removed


def _shims(s: Layout) -> list[int]:
    """containerd-shim processes of this cluster's containerd (its socket in their argv)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and str(s.containerd_socket).encode() in argv:
            pids.append(int(proc.name))
    return pids


def _container_log_links(s: Layout) -> list[Path]:
    folder = Path("/var/log/containers")
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir() if p.is_symlink() and str(os.readlink(p)).startswith(str(s.pod_logs))]


def down(s: Layout, purge: bool = False, say: Callable[[str], None] = print) -> None:
    """Take the cluster down; nothing of it is left outside the state directory (which `purge` removes)."""
    if os.geteuid() != 0:
        raise ClusterError("peerlab cluster down runs as root (it removes mounts, interfaces and iptables rules)")
    for name in ("kube-proxy", "kubelet"):
        if daemons.stop(s, name):
            say(f"stopped {name}")
    crictl = programs.built("crictl")
    if crictl and daemons.pid_of(s, "containerd"):
        pods = _crictl(s, crictl, "pods", "-q").stdout.split()
        if pods:
            say(f"removing {len(pods)} pod sandboxes")
            _crictl(s, crictl, "stopp", *pods)
            _crictl(s, crictl, "rmp", "-f", *pods)
    if daemons.stop(s, "containerd"):
        say("stopped containerd")
    for pid in _shims(s):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    unmounted = _unmount_under(s.root)
    if unmounted:
        say(f"unmounted {unmounted} mounts under {s.root}")
    cgroups = _remove_cgroups()
    if cgroups:
        say(f"removed {cgroups} kubepods cgroups")
    for link in _container_log_links(s):
        link.unlink()
    for what in network.tear_down():
        say(f"removed {what}")
    for name in ("coredns", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        if daemons.stop(s, name):
            say(f"stopped {name}")
    if purge and s.root.exists():
        shutil.rmtree(s.root)
        say(f"removed {s.root}")


def status(s: Layout) -> dict[str, Any]:
    """What runs, whether the API answers and the node is Ready, and what is left on the host."""
    processes = {name: daemons.pid_of(s, name) for name in ORDER}
    api = daemons.answers(f"https://127.0.0.1:{L.API_PORT}/readyz", s) if s.kubeconfig.exists() else False
    ready, why = _node_ready(s) if api else (False, "API server not answering")
    leftovers = network.leftovers() + [f"shim {p}" for p in _shims(s)]
    leftovers += [f"cgroup {p}" for p in _kubepods_cgroups()]
    return {"state_dir": str(s.root), "processes": processes, "api_ready": api, "node_ready": ready,
            "store": {"endpoint": store.endpoint(), "answers": store.answers(s),
                      "settings": str(store.credentials_file(s))} if ready and store.credentials_file(s).exists() else None,
            "node": why, "kubeconfig": str(s.kubeconfig) if s.kubeconfig.exists() else None,
            "leftovers": leftovers if not any(processes.values()) else []}
