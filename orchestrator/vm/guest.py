"""Boot the netem guest, run one command in it as root, and return that command's exit status.

The guest sees, at the same paths as on the host: the checkout (read-only), the Python installation
the checkout's .venv was made from (read-only, when it is not the system's /usr), and whatever else
the caller shares. A job folder (`/peerlab-job`, read-write) carries the command in and anything the
command writes there out. QEMU exits 0 whatever happens inside, so the status is read from the
console: the guest's init prints `PEERLAB-GUEST-EXIT <status>` before it powers off.
"""
from __future__ import annotations

import os
import re
import selectors
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.vm.image import EXIT_MARK, READY_MARK, Image

POWER_OFF = re.compile(r"^\[\s*[\d.]+\] (sysrq: Power Off|reboot: Power down)")


class GuestError(RuntimeError):
    """The guest did not boot, or did not finish in time; the message has the console's last lines."""


@dataclass(frozen=True)
class Share:
    path: Path
    writable: bool = False


def python_share(python: Path) -> Share | None:
    """The installation a venv's interpreter comes from (a pyenv build, say), if it is not under /usr:
    the guest's root filesystem has the same Debian libraries, not the same interpreter."""
    try:
        out = subprocess.run([str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    prefix = Path(out)
    return None if prefix == Path("/usr") or Path("/usr") in prefix.parents else Share(prefix)


def qemu_command(image: Image, job: Path, shares: list[Share], cpus: int, memory_mb: int) -> list[str]:
    cmd = ["qemu-system-x86_64", "-machine", "pc", "-accel", "tcg,thread=multi", "-cpu", "max",
           "-smp", str(cpus), "-m", str(memory_mb),
           "-kernel", str(image.kernel), "-initrd", str(image.initrd),
           "-append", "console=ttyS0 quiet loglevel=3 panic=-1 rw",
           "-drive", f"file={image.rootfs},if=virtio,format=raw,snapshot=on",
           "-virtfs", f"local,path={job},mount_tag=job,security_model=none,id=job",
           "-nic", "none", "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot"]
    for i, share in enumerate(shares):
        ro = "" if share.writable else ",readonly=on"
        cmd += ["-virtfs", f"local,path={share.path},mount_tag=share{i},security_model=none,id=share{i}{ro}"]
    return cmd


def run(image: Image, command: list[str], *, cwd: Path, shares: list[Share], env: dict[str, str] | None = None,
        cpus: int | None = None, memory_mb: int = 4096, timeout: float = 1800,
        echo: Callable[[str], None] = print) -> int:
    """Run `command` in `cwd` inside the guest; its exit status. Every console line goes to `echo`."""
    cpus = cpus or os.cpu_count() or 2
    with tempfile.TemporaryDirectory(prefix="peerlab-guest-") as tmp:
        job = Path(tmp)
        (job / "mounts").write_text("".join(f"share{i} {s.path} {'rw' if s.writable else 'ro'}\n"
                                            for i, s in enumerate(shares)))
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        (job / "run.sh").write_text(f"{exports}cd {shlex.quote(str(cwd))} || exit 126\nexec {shlex.join(command)}\n")
        return _boot(qemu_command(image, job, shares, cpus, memory_mb), timeout, echo)


def _boot(cmd: list[str], timeout: float, echo: Callable[[str], None]) -> int:
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tail: list[str] = []
    status = None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buffer = b""
    try:
        while True:
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                raise GuestError(f"the guest did not finish within {timeout:.0f} s; last lines:\n" + "\n".join(tail))
            if not sel.select(min(left, 5)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").rstrip("\r")
                tail = (tail + [line])[-20:]
                if m := re.match(rf"{EXIT_MARK} (\d+)", line):
                    status = int(m.group(1))
                elif line.startswith(READY_MARK):
                    echo(f"[guest] up in {time.monotonic() - started:.1f} s")
                elif not POWER_OFF.search(line):
                    echo(line)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if status is None:
        raise GuestError(f"QEMU exited ({proc.returncode}) without the command's status; last lines:\n"
                         + "\n".join(tail))
    return status


def checkout_shares(checkout: Path, python: Path) -> list[Share]:
    """The checkout and the interpreter its venv runs on."""
    shares = [Share(checkout)]
    if (py := python_share(python)) and not py.path.is_relative_to(checkout):
        shares.append(py)
    return shares
