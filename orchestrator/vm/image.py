"""Build the netem guest's image from Debian packages only, and find it again.

    linux-image-amd64    the kernel (vmlinuz) and its modules, unpacked with dpkg-deb
    debootstrap minbase  the root filesystem (iproute2, iptables, kmod, procps, python3 and the
                         libraries the host's interpreter links against), the same release as the host
    busybox-static       the initramfs: loads virtio and ext4 (modules in Debian's kernel), mounts the
                         root filesystem, hands over to the guest's init (GUEST_INIT below)

The result lives in $PEERLAB_CACHE/vm/<release> (default ~/.cache/peerlab/vm/...): vmlinuz, initrd,
rootfs.ext4 and image.json. Booting never writes to rootfs.ext4 (QEMU's snapshot mode). A recipe
change (packages, modules, init) makes `ensure` build again; about a minute and 1 GB of disk.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from node.paths import cache_root

PACKAGES = ["iproute2", "iptables", "iputils-ping", "kmod", "procps", "python3"]
# loaded by the initramfs, in dependency order, before the root filesystem can be mounted
BOOT_MODULES = ["virtio_pci", "virtio_blk", "crc32c_generic", "ext4"]  # ext4 asks the crypto API for crc32c
# loaded by the guest's init: 9p for the shared folders, then what peerlab's shaping asks the kernel for
GUEST_MODULES = ["9pnet_virtio", "9p", "veth", "ifb", "sch_htb", "sch_netem", "sch_ingress", "cls_u32",
                 "act_mirred", "nfnetlink_queue", "xt_NFQUEUE"]
EXIT_MARK = "PEERLAB-GUEST-EXIT"
READY_MARK = "PEERLAB-GUEST-READY"
JOB_DIR = "/peerlab-job"

INITRAMFS_INIT = """#!/bin/busybox sh
# the netem guest's initramfs: load virtio and ext4, mount the root filesystem, hand over
B=/bin/busybox
$B mkdir -p /proc /dev /newroot
$B mount -t proc proc /proc
$B mount -t devtmpfs devtmpfs /dev
for m in $($B cat /modules); do $B insmod "/lib/$m" || echo "peerlab guest: insmod $m failed"; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do $B sleep 0.05; i=$((i + 1)); done
if ! $B mount -t ext4 /dev/vda /newroot; then
  echo "%(exit)s 125 (no root filesystem on /dev/vda)"
  $B poweroff -f
fi
$B umount /proc
$B mount --move /dev /newroot/dev
exec $B switch_root /newroot /sbin/peerlab-guest-init
""" % {"exit": EXIT_MARK}

GUEST_INIT = """#!/bin/sh
# PID 1 of the netem guest: mount what a Linux userland expects, the host's shared folders (listed in
# %(job)s/mounts: tag, path, ro|rw), run %(job)s/run.sh, print its exit status, power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /run/lock
ip link set lo up
modprobe -a %(modules)s
mkdir -p %(job)s
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job %(job)s
while read -r tag path mode; do
  mkdir -p "$path"
  mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144,cache=loose,$mode" "$tag" "$path"
done < %(job)s/mounts
echo "%(ready)s $(cut -d' ' -f1 /proc/uptime)"
sh %(job)s/run.sh < /dev/null
rc=$?
echo "%(exit)s $rc"
sync
echo o > /proc/sysrq-trigger
sleep 10
""" % {"job": JOB_DIR, "modules": " ".join(GUEST_MODULES), "ready": READY_MARK, "exit": EXIT_MARK}

HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "debootstrap": "debootstrap", "busybox": "busybox-static",
         "mke2fs": "e2fsprogs", "dpkg-deb": "dpkg", "apt-get": "apt"}


class ImageError(RuntimeError):
    """The guest cannot be built here; the message says what is missing."""


@dataclass(frozen=True)
class Image:
    dir: Path
    kernel_version: str

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd"

    @property
    def rootfs(self) -> Path:
        return self.dir / "rootfs.ext4"


def recipe() -> str:
    """What the image is made of; a change rebuilds it."""
    text = json.dumps([PACKAGES, BOOT_MODULES, GUEST_MODULES, INITRAMFS_INIT, GUEST_INIT, HOSTS])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def release() -> str:
    """The host's Debian release: the guest must match it, since it runs the host's interpreter."""
    fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return fields.get("VERSION_CODENAME", "").strip('"') or "bookworm"


def cache_dir() -> Path:
    return cache_root() / "vm" / release()


def find() -> Image | None:
    """The built image, if it is there and of the current recipe."""
    meta = cache_dir() / "image.json"
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    image = Image(meta.parent, info["kernel_version"])
    if info.get("recipe") != recipe() or not all(p.exists() for p in (image.kernel, image.initrd, image.rootfs)):
        return None
    return image


def missing_tools() -> list[str]:
    """Debian packages to install before the guest can be built and booted."""
    return sorted({pkg for tool, pkg in TOOLS.items() if not shutil.which(tool)})


def ensure(say: Callable[[str], None] = print, force: bool = False) -> Image:
    """The image, built first if it is missing or of an older recipe."""
    image = None if force else find()
    return image or build(say)


def mirror() -> str:
    """The Debian mirror the host's apt uses (debootstrap fetches from it)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s*)?)(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1)
    return "http://deb.debian.org/debian"


def _run(cmd: list[str], what: str, **kw) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return proc.stdout


def kernel_package() -> str:
    """linux-image-<version>-amd64: what Debian's linux-image-amd64 depends on today."""
    out = _run(["apt-cache", "depends", "linux-image-amd64"], "apt-cache")
    names = re.findall(r"Depends:\s*(linux-image-\S+)", out)
    if not names:
        raise ImageError("apt-cache knows no linux-image-amd64: run apt-get update")
    return names[0]


def _download(package: str, into: Path) -> Path:
    try:
        _run(["apt-get", "download", package], "apt-get download", cwd=into)
    except ImageError:
        _run(["apt-get", "update", "-qq"], "apt-get update")
        _run(["apt-get", "download", package], "apt-get download", cwd=into)
    return next(into.glob(f"{package}_*.deb"))


def module_order(modules_dir: Path, names: list[str]) -> list[str]:
    """Paths (relative to modules_dir) of `names` and what they depend on, dependencies first,
    from depmod's modules.dep."""
    deps: dict[str, list[str]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        module, _, rest = line.partition(":")
        deps[module] = rest.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in reversed(deps[path]):
            visit(dep)
        order.append(path)

    for name in names:
        if name not in by_name:
            raise ImageError(f"module {name} is not in {modules_dir} (built into this kernel?)")
        visit(by_name[name])
    return order


def build(say: Callable[[str], None] = print) -> Image:
    """Build the image into cache_dir() (replacing what is there). Needs root and the Debian tools."""
    if os.geteuid() != 0:
        raise ImageError("building the netem guest needs root (debootstrap, chroot)")
    if missing := missing_tools():
        raise ImageError(f"missing tools: apt-get install {' '.join(missing)} (or: .ci/system-packages vm)")
    target = cache_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        package = kernel_package()
        say(f"netem guest: downloading {package}")
        deb = _download(package, work)
        say(f"netem guest: debootstrap {release()} minbase + {', '.join(PACKAGES)} (about a minute)")
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", release(), str(rootfs),
              mirror()], "debootstrap")
        say("netem guest: kernel, modules, init")
        version = package.removeprefix("linux-image-")
        kernel = work / "kernel"  # not into rootfs: the .deb's ./lib would replace the /lib -> usr/lib link
        _run(["dpkg-deb", "-x", str(deb), str(kernel)], "dpkg-deb")
        (rootfs / "lib" / "modules").mkdir(parents=True, exist_ok=True)
        shutil.move(kernel / "lib" / "modules" / version, rootfs / "lib" / "modules" / version)
        shutil.move(kernel / "boot" / f"vmlinuz-{version}", work / "vmlinuz")
        shutil.rmtree(kernel)
        deb.unlink()
        _run(["chroot", str(rootfs), "/sbin/depmod", version], "depmod")
        _write(rootfs / "sbin" / "peerlab-guest-init", GUEST_INIT, 0o755)
        _write(rootfs / "etc" / "hosts", HOSTS)
        _write(rootfs / "etc" / "hostname", "peerlab-guest\n")
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        _initramfs(rootfs / "lib" / "modules" / version, work)
        say("netem guest: root filesystem image")
        size_mb = _du_mb(rootfs) * 3 // 2 + 256
        _run(["mke2fs", "-q", "-t", "ext4", "-d", str(rootfs), "-L", "peerlab", "-F", str(work / "rootfs.ext4"),
              f"{size_mb}M"], "mke2fs")
        shutil.rmtree(rootfs)
        (work / "image.json").write_text(json.dumps({"recipe": recipe(), "kernel_version": version,
                                                     "kernel_package": package, "release": release(),
                                                     "packages": PACKAGES}, indent=1))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
        work.mkdir()  # for TemporaryDirectory's clean-up
    say(f"netem guest: ready in {target}")
    return Image(target, version)


def _initramfs(modules_dir: Path, work: Path) -> None:
    """busybox, the boot modules and INITRAMFS_INIT, as a newc cpio archive (the kernel reads it
    uncompressed)."""
    root = work / "initramfs"
    (root / "bin").mkdir(parents=True)
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if subprocess.run(["ldd", str(busybox)], capture_output=True).returncode == 0:  # ldd fails on static binaries
        raise ImageError(f"{busybox} is linked dynamically; the initramfs needs busybox-static")
    shutil.copy(busybox, root / "bin" / "busybox")
    order = module_order(modules_dir, BOOT_MODULES)
    for rel in order:
        dest = root / "lib" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(modules_dir / rel, dest)
    _write(root / "modules", "\n".join(order) + "\n")
    _write(root / "init", INITRAMFS_INIT, 0o755)
    files = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
    with open(work / "initrd", "wb") as out:
        proc = subprocess.run(["busybox", "cpio", "-o", "-H", "newc"], cwd=root, input=files, stdout=out,
                              stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise ImageError(f"busybox cpio failed: {proc.stderr.decode().strip()}")
    shutil.rmtree(root)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _du_mb(path: Path) -> int:
    return int(_run(["du", "-sm", str(path)], "du").split()[0])
