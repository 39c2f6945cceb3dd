"""`peerlab fuzz`: malformed frames into every wire decoder."""
from __future__ import annotations

import argparse
import subprocess
import sys

from orchestrator.cli.common import UsageError, add_command, err

DESCRIPTION = """
Feed each decoder malformed frames (random bytes; valid frames truncated, bit-flipped, spliced, with
lying lengths) and count crashes: exceptions other than the decoder's own refusal.

One line per decoder: decoder=<name> frames=<n> crashes=<k>. Exit 1 if any crashed (its first failing
input and traceback go to stderr).
"""


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "fuzz", help="fuzz every wire decoder (framing, pubsub RPC, each protocol core) with malformed frames",
        description=DESCRIPTION,
        examples=["peerlab fuzz --frames 10000", "peerlab fuzz --decoder rpc --decoder core:scoutsubs"])
    p.add_argument("--frames", type=int, default=100_000, help="inputs per decoder (default 100000)")
    p.add_argument("--decoder", dest="decoders", action="append", metavar="NAME",
                   help="only this one (repeat); names: frame, rpc, core:<protocol>")
    p.add_argument("--engine", choices=["auto", "atheris", "hypothesis"], default="auto",
                   help="auto: atheris (coverage-guided) if installed, else hypothesis")
    p.set_defaults(func=cmd_fuzz)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from node import fuzz

    engine = args.engine
    if engine == "auto":
        engine = "atheris" if fuzz.have_atheris() else "hypothesis"
    elif engine == "atheris" and not fuzz.have_atheris():
        raise UsageError("atheris is not installed (pip install atheris; it needs a manylinux x86_64 or "
                          "aarch64 wheel or clang); use --engine hypothesis")
    names = args.decoders or fuzz.targets()
    unknown = [n for n in names if n not in fuzz.targets()]
    if unknown:
        raise UsageError(f"unknown decoder {unknown[0]!r}; known: {', '.join(fuzz.targets())}")
    total = 0
    for name in names:
        err.print(f"fuzzing {name}: {args.frames:,} frames with {engine} ...")
        proc = subprocess.run([sys.executable, "-m", "node.fuzz", name, str(args.frames), engine],
                              capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("decoder=")), None)
        if line is None:  # the fuzzer itself died: that counts as a crash, with its output
            line = f"decoder={name} frames=0 crashes=1 engine={engine}"
            err.print(proc.stderr[-2000:], markup=False, highlight=False)
        elif " crashes=0 " not in line + " ":
            err.print(proc.stderr[-4000:], markup=False, highlight=False)
        print(line, flush=True)
        total += int(line.split("crashes=")[1].split()[0])
    err.print(f"{len(names)} decoders, {total} crashes")
    return 1 if total else 0
