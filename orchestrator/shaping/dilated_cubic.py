"""peerlab_cubic, the TCP congestion control of a dilated run's node namespaces on this machine's kernel:
Linux's cubic with its clocks in experiment time (bpf/dilated_cubic.bpf.c says what differs and why;
docs/dilation.md what it changes).

Owns building it and keeping it registered. Built once per source, kernel and clang into the user's
cache (`~/.cache/peerlab/bpf/`, or under $PEERLAB_CACHE): clang compiles it against this kernel's
types (vmlinux.h, dumped by bpftool from /sys/kernel/btf/vmlinux); the packages are installed first
where they are missing (`.ci/system-packages bpf`, as root). Registered with the kernel (bpftool
struct_ops) while a run on this machine uses it: each run holds a claim (a file named for the run
under /run/peerlab/dilated-cubic, holding its orchestrator's pid), the last live claim released
unregisters it, and `peerlab clean` releases a dead run's (the local backend's `remove_run_objects`). Standard library only;
tcp_settings calls it."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

NAME = "peerlab_cubic"  # as the kernel lists it (tcp_available_congestion_control, ss -ti)
SOURCE = Path(__file__).resolve().parent / "bpf" / "dilated_cubic.bpf.c"
BTF = Path("/sys/kernel/btf/vmlinux")
CLAIMS = Path("/run/peerlab/dilated-cubic")
AVAILABLE_PATH = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
CFLAGS = ["-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Werror"]
SYSTEM_PACKAGES = Path(__file__).resolve().parents[2] / ".ci" / "system-packages"


class Unavailable(RuntimeError):
    """peerlab_cubic cannot be built or registered here; the message says why and what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("PEERLAB_CACHE") or Path.home() / ".cache" / "peerlab") / "bpf"


def _clang_version() -> str:
    if not shutil.which("clang"):
        return "none"
    out = subprocess.run(["clang", "--version"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else "none"


def object_path(build: bool = True) -> Path:
    """The compiled object for this source, kernel and clang, built first unless `build` is false
    (the tools installed first where they are missing: the object's name depends on clang's version)."""
    if build:
        _ensure_tools()
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(" ".join([_clang_version(), platform.release(), *CFLAGS]).encode())
    target = cache_dir() / f"dilated-cubic-{h.hexdigest()[:16]}.o"
    if build and not target.exists():
        _build(target)
    return target


def _tools_missing() -> list[str]:
    missing = [tool for tool in ("clang", "bpftool") if not shutil.which(tool)]
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        missing.append("libbpf-dev")
    return missing


def _ensure_tools() -> None:
    """clang, bpftool and libbpf-dev, installed as root with apt where missing; Unavailable otherwise."""
    if _tools_missing():
        if os.geteuid() == 0 and SYSTEM_PACKAGES.exists() and shutil.which("apt-get"):
            print(f"peerlab: installing {', '.join(_tools_missing())} to build {NAME}, a dilated run's TCP (once)",
                  file=sys.stderr, flush=True)
            subprocess.run([str(SYSTEM_PACKAGES), "bpf"], stdout=subprocess.DEVNULL)
        if _tools_missing():
            raise Unavailable(f"building {NAME} needs {', '.join(_tools_missing())}: install them "
                              "(apt-get install clang bpftool libbpf-dev)")


def _build(target: Path) -> None:
    if not BTF.exists():
        raise Unavailable(f"this kernel publishes no BTF ({BTF}): it was built without CONFIG_DEBUG_INFO_BTF")
    began = time.monotonic()
    print(f"peerlab: building {NAME} (cubic in experiment time, for dilated runs) once into {target.parent}",
          file=sys.stderr, flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peerlab-bpf-") as tmp:
        with open(Path(tmp) / "vmlinux.h", "w") as header:
            dumped = subprocess.run(["bpftool", "btf", "dump", "file", str(BTF), "format", "c"], stdout=header,
                                    stderr=subprocess.PIPE, text=True)
        if dumped.returncode != 0:
            raise Unavailable(f"bpftool could not dump this kernel's types: {dumped.stderr.strip()[-300:]}")
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        built = subprocess.run(["clang", *CFLAGS, "-I", tmp, "-c", str(SOURCE), "-o", str(partial)],
                               capture_output=True, text=True)
        if built.returncode != 0:
            partial.unlink(missing_ok=True)
            raise Unavailable(f"clang could not build {SOURCE.name}: {built.stderr.strip()[-600:]}")
        os.replace(partial, target)
    print(f"peerlab: built {NAME} in {time.monotonic() - began:.1f}s", file=sys.stderr, flush=True)


def status() -> tuple[bool, str]:
    """Can a dilated run here have peerlab_cubic, and in what state is it (for `peerlab doctor`)?
    Builds, installs and registers nothing."""
    if not BTF.exists():
        return False, (f"this kernel publishes no BTF ({BTF}): dilated runs keep the kernel's cubic, whose "
                       "HyStart and curve run on real time (docs/dilation.md#tcp)")
    missing = _tools_missing()
    if missing:
        return False, (f"not built: needs {', '.join(missing)} (make dev installs them; so does the first "
                       "dilated run as root); meanwhile dilated runs keep the kernel's cubic")
    target = object_path(build=False)
    in_use = "; registered now (a run on this machine is using it)" if registered() else ""
    if target.exists():
        return True, f"built ({target}){in_use}: dilated runs with cubic use it"
    return True, f"not built yet: the first dilated run builds it (about a second), or make dilated-cubic{in_use}"


def registered() -> bool:
    try:
        return NAME in AVAILABLE_PATH.read_text().split()
    except OSError:
        return False


@contextlib.contextmanager
def _claims() -> Iterator[Path]:
    """The claims' directory, held against every other run's claim or release."""
    CLAIMS.mkdir(parents=True, exist_ok=True)
    with open(CLAIMS.parent / "dilated-cubic.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield CLAIMS


def claim(run: str) -> None:
    """Run `run` uses peerlab_cubic: built if need be, registered if it is not. Raises Unavailable."""
    if os.geteuid() != 0:
        raise Unavailable("registering a congestion control with the kernel needs root")
    path = object_path()
    with _claims() as claims:
        if not registered():
            done = subprocess.run(["bpftool", "struct_ops", "register", str(path)], capture_output=True, text=True)
            if done.returncode != 0 or not registered():
                raise Unavailable(f"the kernel refused {NAME} (bpftool struct_ops register: "
                                  f"{(done.stderr or done.stdout).strip()[-300:]})")
        (claims / run).write_text(str(os.getpid()))


def release(run: str) -> None:
    """Run `run` no longer uses it; unregistered when no live run does (a claim whose process has
    died, a run killed with its orchestrator, counts for nothing). Safe for a run without a claim, and
    for any user (only root claims; the claims' directory is root's alone)."""
    try:
        if os.geteuid() != 0 or not (CLAIMS / run).exists():
            return
    except OSError:
        return
    with _claims() as claims:
        (claims / run).unlink(missing_ok=True)
        if not any(_alive(claim) for claim in claims.iterdir()):
            unregister()


def _alive(claim: Path) -> bool:
    """Is the process that made this claim still running? (A dead one's claim is removed.)"""
    try:
        os.kill(int(claim.read_text()), 0)
        return True
    except (ValueError, OSError) as err:
        if isinstance(err, PermissionError):
            return True
        claim.unlink(missing_ok=True)
        return False


def unregister() -> None:
    """Every registration of peerlab_cubic withdrawn (sockets still using it keep it until they close)."""
    listed = subprocess.run(["bpftool", "-j", "struct_ops", "show"], capture_output=True, text=True)
    if listed.returncode != 0:
        return
    for ops in json.loads(listed.stdout or "[]"):
        if ops.get("name") == NAME:
            subprocess.run(["bpftool", "struct_ops", "unregister", "id", str(ops["id"])], capture_output=True)


def main() -> int:
    """`make dilated-cubic`: build it (printing its path) without registering it."""
    try:
        print(object_path())
    except Unavailable as err:
        print(f"peerlab: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
