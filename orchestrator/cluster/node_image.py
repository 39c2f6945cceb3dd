"""The kind node image, built on this machine (no registry is reachable): kind's node layout on
Debian's packages, Kubernetes' programs built from their pinned modules, and every image the cluster
starts with preloaded into the node's containerd.

    peerlab.local/kind-node:<hash>   systemd, containerd 1.6, runc, the CNI plugins, iptables (Debian);
                                     kind's entrypoint and systemd units (from the pinned kind module);
                                     kubeadm, kubelet, kubectl, crictl (programs.py); /kind/version;
                                     the default CNI: flannel's vxlan overlay (node/flannel.yaml);
                                     runc-bounded as containerd's runc (node/runc-bounded says why)
    peerlab.local/k8s/*              kube-apiserver, -controller-manager, -scheduler, kube-proxy
                                     v1.34.4, etcd, coredns, flannel, pause: each a binary on a Debian
                                     base, imported into the node's containerd before kind starts it

The tag is a hash of every input (the programs' file names are hashes of their pins), so a second
`peerlab cluster up` builds nothing. May import: orchestrator.builds, orchestrator.cluster.programs.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from orchestrator.builds import node_image
from orchestrator.cluster import programs

HERE = Path(__file__).resolve().parent
FILES = HERE / "node"
PAUSE_SOURCE = HERE / "images" / "pause.c"
REPOSITORY = "peerlab.local/kind-node"
IMAGE_REPOSITORY = "peerlab.local/k8s"  # kubeadm's imageRepository: where it finds the control plane
PAUSE_VERSION = "3.10.1"
PACKAGES = ("systemd containerd runc containernetworking-plugins conntrack iptables iproute2 ethtool util-linux "
            "mount kmod libseccomp2 pigz bash ca-certificates procps socat")


class NodeImageError(RuntimeError):
    """The node image could not be built; the message says which step failed and what it said."""


def versions() -> dict[str, str]:
    """The tag of each component image: the release its binary is."""
    k8s = programs.kubernetes_version()
    return {"kube-apiserver": k8s, "kube-controller-manager": k8s, "kube-scheduler": k8s, "kube-proxy": k8s,
            "etcd": programs.module_version("kubernetes", "go.etcd.io/etcd/server/v3").lstrip("v") + "-0",
            "coredns": programs.module_version("coredns", "github.com/coredns/coredns"),
            "flannel": programs.module_version("flannel", "github.com/flannel-io/flannel")}


def component_images() -> dict[str, str]:
    """name -> the image reference the cluster asks for."""
    images = {name: f"{IMAGE_REPOSITORY}/{name}:{tag}" for name, tag in versions().items()}
    images["pause"] = f"{IMAGE_REPOSITORY}/pause:{PAUSE_VERSION}"
    return images


def kind_files() -> Path:
    """kind's node files (entrypoint, systemd units) from the pinned kind module, downloaded by Go."""
    version = programs.module_version("kind", "sigs.k8s.io/kind")
    done = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kind@{version}"], cwd=programs.PINS / "kind",
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise NodeImageError(f"go mod download sigs.k8s.io/kind@{version} failed: {done.stderr.strip()[-500:]}")
    import json
    return Path(json.loads(done.stdout)["Dir"]) / "images" / "base" / "files"


def _binaries() -> dict[str, Path]:
    try:
        found = programs.locate(build=True)
    except programs.MissingProgram as err:
        raise NodeImageError(str(err)) from None
    return found


def image_tag(binaries: dict[str, Path] | None = None) -> str:
    binaries = binaries or {n: programs.built(n) or Path(n) for n in programs.BUILT}
    h = hashlib.sha256(node_image.base_image().encode() + b"\0" + PACKAGES.encode())
    for name in sorted(binaries):
        h.update(f"{name}={binaries[name].name}\0".encode())
    for path in sorted(FILES.iterdir()) + [PAUSE_SOURCE, Path(__file__)]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(programs.module_version("kind", "sigs.k8s.io/kind").encode())
    return f"{REPOSITORY}:{h.hexdigest()[:12]}"


def _docker(*args: str, what: str, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise NodeImageError(f"{what} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    return done


def has(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def _link(src: Path, folder: Path, name: str) -> None:
    try:
        os.link(src, folder / name)  # the cache and a temporary directory beside it: no copy
    except OSError:
        shutil.copy2(src, folder / name)


def _component_images(binaries: dict[str, Path], say: Callable[[str], None]) -> dict[str, str]:
    """Build every component image into the Docker engine; name -> reference."""
    refs = component_images()
    base = node_image.base_image()
    with tempfile.TemporaryDirectory(dir=binaries["kubelet"].parent) as tmp:
        root = Path(tmp)
        (root / "base").mkdir()
        (root / "base" / "Dockerfile").write_text(
            f"FROM {base}\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            "--no-install-recommends iptables conntrack iproute2 >/dev/null && rm -rf /var/lib/apt/lists/*\n")
        base_ref = f"{IMAGE_REPOSITORY}/base:{hashlib.sha256(base.encode()).hexdigest()[:12]}"
        if not has(base_ref):
            say(f"  building {base_ref} (Debian's iptables and conntrack on {base})")
            _docker("build", "-q", "-t", base_ref, str(root / "base"), what=f"docker build {base_ref}")
        for name, ref in refs.items():
            folder = root / name
            folder.mkdir()
            if name == "pause":
                done = subprocess.run(["gcc", "-static", "-Os", "-o", str(folder / "pause"), str(PAUSE_SOURCE)],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise NodeImageError(f"gcc could not build the pods' sandbox (needs gcc, libc6-dev): {done.stderr[-500:]}")
                (folder / "Dockerfile").write_text('FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n')
            else:
                program = "flanneld" if name == "flannel" else name
                _link(binaries[program], folder, program)
                extra = ""
                if name == "flannel":
                    shutil.copy2(FILES / "flannel-cni-config", folder / "flannel-cni-config")
                    extra = "COPY flannel-cni-config /usr/local/bin/flannel-cni-config\n"
                entry = f'ENTRYPOINT ["/usr/local/bin/{program}"]\n' if name == "coredns" else ""
                (folder / "Dockerfile").write_text(f"FROM {base_ref}\nCOPY {program} /usr/local/bin/{program}\n{extra}{entry}")
            say(f"  building {ref}")
            _docker("build", "-q", "-t", ref, str(folder), what=f"docker build {ref}")
    return refs


def _dockerfile(base: str, k8s_version: str) -> str:
    return f"""FROM {base}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {PACKAGES} >/dev/null \\
 && rm -rf /var/lib/apt/lists/* \\
 && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
    /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
    /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo ReadKMsg=no >> /etc/systemd/journald.conf \\
 && ln -sf /usr/lib/systemd/systemd /sbin/init
COPY kind/usr/local/bin/ /usr/local/bin/
COPY kind/kind/ /kind/
COPY kind/etc/sysctl.d/ /etc/sysctl.d/
COPY kind/etc/default/ /etc/default/
COPY kind/etc/crictl.yaml /etc/crictl.yaml
COPY kind/etc/systemd/system/ /etc/systemd/system/
COPY containerd.toml /etc/containerd/config.toml
COPY containerd-bounded.conf /etc/systemd/system/containerd.service.d/10-peerlab.conf
COPY runc-bounded /usr/local/bin/runc-bounded
COPY kubeadm kubelet kubectl crictl /usr/bin/
COPY default-cni.yaml /kind/manifests/default-cni.yaml
RUN chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/* \\
 && echo {k8s_version} > /kind/version \\
 && mkdir -p /etc/kubernetes/manifests /etc/cni/net.d /opt/cni \\
 && ln -s /usr/lib/cni /opt/cni/bin \\
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
"""


def _preload(staged: str, tag: str, refs: dict[str, str], say: Callable[[str], None]) -> None:
    """Import the component images into the staged image's containerd, then commit it as `tag`."""
    name = f"peerlab-node-preload-{os.getpid()}"
    _docker("run", "-d", "--name", name, "--privileged", "--entrypoint", "/bin/sleep", staged, "infinity",
            what="starting the node image to preload its images")
    try:
        _docker("exec", "-d", name, "/usr/bin/containerd", what="containerd in the node image")
        deadline = time.monotonic() + 30
        while subprocess.run(["docker", "exec", name, "ctr", "version"], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise NodeImageError("containerd in the node image did not answer within 30 s")
            time.sleep(0.5)
        for ref in refs.values():
            say(f"  preloading {ref}")
            save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
            done = subprocess.run(["docker", "exec", "-i", name, "ctr", "-n", "k8s.io", "images", "import",
                                   "--no-unpack", "-"], stdin=save.stdout, capture_output=True, text=True)
            save.stdout.close()
            if save.wait() != 0 or done.returncode != 0:
                raise NodeImageError(f"importing {ref} into the node image failed: {done.stderr.strip()[-500:]}")
        subprocess.run(["docker", "exec", name, "pkill", "-TERM", "containerd"], capture_output=True)
        time.sleep(1)
        _docker("commit", "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]', "--change", "CMD []",
                name, tag, what=f"docker commit {tag}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def build(say: Callable[[str], None] = print) -> str:
    """The node image (built unless the Docker engine has it); its tag."""
    binaries = _binaries()
    tag = image_tag(binaries)
    if has(tag):
        return tag
    started = time.monotonic()
    say(f"building the kind node image {tag} (once per change of its inputs: a few minutes)")
    refs = _component_images(binaries, say)
    kind = kind_files()
    base = node_image.base_image()
    with tempfile.TemporaryDirectory(dir=binaries["kubelet"].parent) as tmp:
        root = Path(tmp)
        shutil.copytree(kind, root / "kind")
        for f in ("containerd.toml", "containerd-bounded.conf", "runc-bounded"):
            shutil.copy2(FILES / f, root / f)
        for program in ("kubeadm", "kubelet", "kubectl", "crictl"):
            _link(binaries[program], root, program)
        (root / "default-cni.yaml").write_text((FILES / "flannel.yaml").read_text().replace("FLANNEL_IMAGE", refs["flannel"]))
        (root / "Dockerfile").write_text(_dockerfile(base, programs.kubernetes_version()))
        staged = f"{tag}-staged"
        say(f"  building {staged} (Debian's systemd, containerd, runc and CNI plugins on {base})")
        _docker("build", "-q", "-t", staged, str(root), what=f"docker build {staged}")
    try:
        _preload(staged, tag, refs, say)
    finally:
        subprocess.run(["docker", "rmi", staged], capture_output=True)
    say(f"  {tag} built in {time.monotonic() - started:.0f} s")
    return tag
