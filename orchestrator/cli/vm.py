"""`peerlab vm`: the netem guest (orchestrator/vm), for checking the netem path on a kernel without it."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from node.paths import ROOT
from orchestrator.cli.common import UsageError, add_command, err

GUEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PY_COLORS": "0", "TERM": "dumb"}
DESCRIPTION = """
Kernels without sch_netem (many CI machines, WSL2) cannot run peerlab's netem mode. The guest boots
Debian's stock kernel under QEMU's software emulation (no KVM needed; the guest CPU is 15-20x slower),
with this checkout and its Python shared in read-only at the same paths, and runs one command in it
as root.
"""


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "vm", help="a Debian guest under QEMU, for the netem path on a kernel without sch_netem",
        description=DESCRIPTION,
        examples=["peerlab vm build                      # about a minute, 1 GB under ~/.cache/peerlab/vm",
                  "peerlab vm run -- .venv/bin/python -m pytest -m netem tests/emulation/test_netem.py"
                  "   # what make test-netem runs",
                  "peerlab vm run -- tc qdisc add dev lo root netem delay 10ms"],
        note="Needs root and Debian's qemu-system-x86, debootstrap and busybox-static (.ci/system-packages vm).")
    vsub = p.add_subparsers(dest="vm_command", required=True, metavar="{build,run}")
    b = vsub.add_parser("build", help="build the guest from Debian packages (kernel, root filesystem, initramfs)")
    b.add_argument("--force", action="store_true", help="build again even if an image of this recipe exists")
    b.set_defaults(func=cmd_build)
    r = vsub.add_parser("run", help="boot the guest, run a command in this checkout there, exit with its status",
                        description="Boot the guest (building it first if needed), run COMMAND as root in this "
                                    "checkout, print its output, exit with its exit status.")
    r.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="virtual CPUs (default: this machine's)")
    r.add_argument("--memory", type=int, default=4096, metavar="MB", help="guest memory (default 4096)")
    r.add_argument("--timeout", type=float, default=1800, metavar="S", help="give up after S seconds (default 1800)")
    r.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set in the guest (repeatable)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command (after --)")
    r.set_defaults(func=cmd_run)


def _say(message: str) -> None:
    err.print(message, markup=False, highlight=False)


def cmd_build(args: argparse.Namespace) -> int:
    from orchestrator.vm import image

    try:
        image.ensure(_say, force=args.force)
    except image.ImageError as e:
        err.print(f"error: {e}", style="bold red", markup=False, highlight=False)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from orchestrator.vm import guest, image

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("peerlab vm run: give the command after --, e.g. peerlab vm run -- uname -r")
    env = dict(GUEST_ENV)
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env: {item!r} is not KEY=VALUE")
        env[key] = value
    try:
        img = image.ensure(_say)
        return guest.run(img, command, cwd=ROOT, shares=guest.checkout_shares(ROOT, Path(sys.executable)), env=env,
                         cpus=args.cpus, memory_mb=args.memory, timeout=args.timeout,
                         echo=lambda line: print(line, flush=True))
    except (image.ImageError, guest.GuestError) as e:
        err.print(f"error: {e}", style="bold red", markup=False, highlight=False)
        return 1
