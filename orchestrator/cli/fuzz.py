"""`peerlab fuzz`: malformed frames into every wire decoder (node/wire_fuzz.py), and mutated scenarios into
validate and plan (orchestrator/cli/scenario_fuzz.py)."""
from __future__ import annotations

import argparse
import subprocess
import sys

from orchestrator.cli.common import UsageError, add_command, err

DESCRIPTION = """
Feed each decoder malformed frames (random bytes; valid frames truncated, bit-flipped, spliced, with
lying lengths) and count crashes: exceptions other than the decoder's own refusal.

--decoder scenario fuzzes the scenario instead: first the hand-made hostile classes (a FIFO or
/dev/zero as the scenario, a billion laughs, a key given twice, 5000-digit numbers, credentials in a
store URL, ...), each of which must be refused; then the repository's scenarios, mutated (wrong types,
NaN, huge numbers, removed fields, garbled YAML, anchors, matrices, terminal escapes, deep nesting, data
paths at hostile files: FIFOs, symlinks to /etc/shadow, hard links, /dev/zero, oversized files),
through `peerlab validate` and `peerlab plan`; a crash is any ending other than exit 0 or a refusal
(exit 2, a few printable lines, one per problem naming its field, no traceback), or an input taking
more than 2 s. It is not in the default set (an input takes tens of milliseconds, not microseconds).

One line per decoder: decoder=<name> frames=<n> crashes=<k>. Exit 1 if any crashed (its first failing
input and traceback go to stderr).
"""
SCENARIO = "scenario"


def add(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "fuzz", help="fuzz every wire decoder (framing, pubsub RPC, each protocol core) with malformed frames",
        description=DESCRIPTION,
        examples=["peerlab fuzz --frames 10000", "peerlab fuzz --decoder rpc --decoder core:scoutsubs",
                  "peerlab fuzz --decoder scenario --frames 10000 --seed 3"])
    p.add_argument("--frames", type=int, default=100_000, help="inputs per decoder (default 100000)")
    p.add_argument("--decoder", dest="decoders", action="append", metavar="NAME",
                   help="only this one (repeat); names: frame, rpc, core:<protocol>, and scenario (not run by default)")
    p.add_argument("--seed", type=int, default=0, help="scenario: the mutations' seed (a crash report names it)")
    p.add_argument("--engine", choices=["auto", "atheris", "hypothesis"], default="auto",
                   help="auto: atheris (coverage-guided) if installed, else hypothesis")
    p.set_defaults(func=cmd_fuzz)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from node import wire_fuzz as fuzz

    engine = args.engine
    if engine == "auto":
        engine = "atheris" if fuzz.have_atheris() else "hypothesis"
    elif engine == "atheris" and not fuzz.have_atheris():
        raise UsageError("atheris is not installed (pip install atheris; it needs a manylinux x86_64 or "
                          "aarch64 wheel or clang); use --engine hypothesis")
    names = args.decoders or fuzz.targets()
    unknown = [n for n in names if n not in (*fuzz.targets(), SCENARIO)]
    if unknown:
        raise UsageError(f"unknown decoder {unknown[0]!r}; known: {', '.join(fuzz.targets())}, {SCENARIO}")
    total = 0
    for name in names:
        if name == SCENARIO:
            err.print(f"fuzzing {name}: {args.frames:,} mutated scenarios (seed {args.seed}) ...")
            command = ["-m", "orchestrator.cli.scenario_fuzz", str(args.frames), str(args.seed)]
        else:
            err.print(f"fuzzing {name}: {args.frames:,} frames with {engine} ...")
            command = ["-m", "node.wire_fuzz", name, str(args.frames), engine]
        proc = subprocess.run([sys.executable, *command], capture_output=True, text=True)
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
