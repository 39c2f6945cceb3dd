"""The local cluster's programs: Kubernetes 1.34, etcd, CoreDNS and crictl built from their published
Go modules as pinned in orchestrator/cluster/pins (into the user's cache, once: orchestrator/builds/gobuild.py),
containerd, ctr, runc and the CNI plugins from Debian's packages (.ci/system-packages cluster).

`python -m orchestrator.cluster.programs` builds what is missing (set-up runs it) and prints the paths.
"""
from __future__ import annotations

import shutil
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
    "kube-proxy": ("kubernetes", "k8s.io/kubernetes/cmd/kube-proxy"),
    "coredns": ("coredns", "github.com/coredns/coredns"),
    "crictl": ("cri-tools", "sigs.k8s.io/cri-tools/cmd/crictl"),
}
DEBIAN = {"containerd": "containerd", "ctr": "containerd", "runc": "runc"}
CNI_BIN = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


def _kubernetes_version() -> str:
    for line in (PINS / "kubernetes" / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["k8s.io/kubernetes"] or parts[:2] == ["require", "k8s.io/kubernetes"]:
            return parts[-1]
    raise MissingProgram("orchestrator/cluster/pins/kubernetes/go.mod requires no k8s.io/kubernetes")


def ldflags(pin: str) -> str:
    """Kubernetes' version stamp, which its release scripts set and a module build leaves at
    v0.0.0-master (helm refuses a chart's kubeVersion against it; kubectl version shows it)."""
    if pin != "kubernetes":
        return ""
    version = _kubernetes_version()
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
    missing = [pkg for name, pkg in DEBIAN.items() if not shutil.which(name)]
    missing += ["containernetworking-plugins"] if not all((CNI_BIN / p).exists() for p in CNI_PLUGINS) else []
    if missing:
        raise MissingProgram(f"missing Debian packages: {' '.join(sorted(set(missing)))} "
                             "(as root: .ci/system-packages cluster, or apt-get install them)")
    found.update({name: Path(shutil.which(name) or name) for name in DEBIAN})
    found["cni"] = CNI_BIN
    return found


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
