"""The local cluster's programs: kind, Kubernetes 1.34 (kubeadm, kubelet, kubectl, the control plane),
etcd, CoreDNS, crictl and flannel built from their published Go modules as pinned in
orchestrator/cluster/pins (into the user's cache, once: orchestrator/builds/gobuild.py). The node image
holds them with Debian's containerd, runc and CNI plugins (node_image.py).

flannel's main links every backend; one of them, tencentvpc, needs a cloud SDK module the Go proxy
here does not serve: pins/flannel replaces it by a package that refuses every call
(pins/flannel/tencentcloud-vpc-refused); the cluster uses the vxlan backend.

`python -m orchestrator.cluster.programs` builds what is missing (set-up runs it) and prints the paths.
"""
from __future__ import annotations

import sys
from pathlib import Path

from orchestrator.builds import gobuild

PINS = Path(__file__).resolve().parent / "pins"

# name -> (pin, package)
BUILT = {
    "etcd": ("kubernetes", "go.etcd.io/etcd/server/v3"),
    "kube-apiserver": ("kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    "kube-controller-manager": ("kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    "kube-scheduler": ("kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"),
    "kubelet": ("kubernetes", "k8s.io/kubernetes/cmd/kubelet"),
    "kubeadm": ("kubernetes", "k8s.io/kubernetes/cmd/kubeadm"),
    "kubectl": ("kubernetes", "k8s.io/kubernetes/cmd/kubectl"),
    "kube-proxy": ("kubernetes", "k8s.io/kubernetes/cmd/kube-proxy"),
    "coredns": ("coredns", "github.com/coredns/coredns"),
    "crictl": ("cri-tools", "sigs.k8s.io/cri-tools/cmd/crictl"),
    "kind": ("kind", "sigs.k8s.io/kind"),
    "flanneld": ("flannel", "github.com/flannel-io/flannel"),
}


def module_version(pin: str, module: str) -> str:
    """The version of `module` the pin's go.mod requires (v1.34.4)."""
    for line in (PINS / pin / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == [module] or parts[:2] == ["require", module]:
            return parts[-1]
    raise MissingProgram(f"orchestrator/cluster/pins/{pin}/go.mod requires no {module}")


def kubernetes_version() -> str:
    return module_version("kubernetes", "k8s.io/kubernetes")


def ldflags(pin: str) -> str:
    """Kubernetes' version stamp, which its release scripts set and a module build leaves at
    v0.0.0-master (helm refuses a chart's kubeVersion against it; kubectl version shows it)."""
    if pin != "kubernetes":
        return ""
    version = kubernetes_version()
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
             "buildDate": "1970-01-01T00:00:00Z"}
    return " ".join(f"-X {pkg}.{k}={v}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                    for k, v in stamp.items())


class MissingProgram(RuntimeError):
    """A program of the cluster is neither built nor installed; the message says how to get it."""


def locate(build: bool = True) -> dict[str, Path]:
    """Every program's path, building the pinned ones that are missing (minutes the first time on a
    machine) unless `build` is false; MissingProgram names what is missing and how to install it."""
    found: dict[str, Path] = {}
    for name, (pin, package) in BUILT.items():
        try:
            found[name] = gobuild.binary(PINS / pin, package, name, build=build, ldflags=ldflags(pin))
        except gobuild.GoBuildError as err:
            raise MissingProgram(str(err)) from None
        if not found[name].exists():
            raise MissingProgram(f"{name} is not built yet: `make cluster-programs` (or `sudo peerlab cluster up`) builds it")
    return found


def locate_one(name: str, build: bool = True) -> Path:
    """One program's path, built first if missing (unless not `build`: then MissingProgram)."""
    pin, package = BUILT[name]
    try:
        path = gobuild.binary(PINS / pin, package, name, build=build, ldflags=ldflags(pin))
    except gobuild.GoBuildError as err:
        raise MissingProgram(str(err)) from None
    if not path.exists():
        raise MissingProgram(f"{name} is not built yet: `make cluster-programs` (or `sudo peerlab cluster up`) builds it")
    return path


def built(name: str) -> Path | None:
    """A pinned program's path if it is built, else None (never builds)."""
    pin, package = BUILT[name]
    path = gobuild.binary(PINS / pin, package, name, build=False, ldflags=ldflags(pin))
    return path if path.exists() else None


def main() -> int:
    try:
        for name, path in locate().items():
            print(f"{name}\t{path}")
    except MissingProgram as err:
        print(f"peerlab: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
