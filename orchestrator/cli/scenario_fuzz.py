"""The scenario fuzz (`peerlab fuzz --decoder scenario`): mutated scenarios into `peerlab validate` and
`peerlab plan`, counting every input that ends other than as a run could accept (exit 0) or a refusal
(exit 2, each problem on one line naming its field, no traceback).

Scenarios arrive in pull requests and CI runs them as root, so no input may crash the tool. Each input
starts from one of the repository's scenarios (scenarios/*.yaml, node counts cut to at most 40 so that
planning stays quick) and gets one to three mutations: a field removed, a field's value replaced by a
hostile one (wrong types, NaN, infinities, huge and negative numbers, long and odd strings, system
paths, empty containers), an unknown field added, or its YAML text cut or garbled; a data-path field
(`network.latency.path`, `servers`, `pings`, `churn.trace`) points at a hostile file half the time: a
FIFO, a symlink to /etc/shadow, a directory, a hard link, /dev/zero, a file over the size limit,
garbage bytes, CSVs and matrices of the wrong shape or with NaN. One input in six has its YAML text
changed too (scenario_fuzz_cases.py: a key given twice, anchors and aliases, a matrix of any size,
terminal escapes, huge numbers, deep nesting, a churn session of nanoseconds, credentials in a store
URL), and one in seven gets `--matrix` or odd `--set` options. Before them, the hand-made classes of
scenario_fuzz_cases.py (special files, /dev/zero, 5000-digit numbers, a billion laughs, ...) must each
be refused. The generator is seeded: a crash report names the seed and input number, and `--seed`
replays it.

A crash is an input that ends other than in exit 0 or 2, prints a traceback, takes more than
SECONDS_PER_INPUT (wall clock, stretched by PEERLAB_TEST_TIME_SCALE as the suite's timeouts are), or is
refused in more than a few lines, in a line longer than a refusal's, or printing a control character.

    python -m orchestrator.cli.scenario_fuzz INPUTS [SEED]
        one line: decoder=scenario frames=N crashes=K engine=mutation seed=S accepted=A refused=R
                  hand_made=H slowest=T (seconds, of every input)
"""
from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import yaml

from node.paths import ROOT
from orchestrator.cli.scenario_fuzz_cases import CANARY, extra_args, hand_made, text_mutation
from orchestrator.model import bounded

DATA_FIELDS = (("network", "latency", "path"), ("network", "latency", "servers"),
               ("network", "latency", "pings"), ("churn", "trace"))
VALUES: list[Any] = [None, True, False, 0, -1, 1, 2**64, -(2**63), 1e308, -1e-300, math.nan, math.inf, -math.inf,
                     "", " ", "x" * 5000, "🙂", "nan", "inf", "-5ms", "1e999s", "10/0s", "0x10", "..", "/etc/shadow",
                     "file:///etc", "s3://", "{{}}", "%s%n", "\x00", "a\nb", [], {}, [None], [[]], {"x": 1},
                     [1, "a", None], {"model": "matrix"}, 5000, 100_001, 0.5, "50mbit", "1/0s", "-1/s", "1e400KiB",
                     "1ns", "1e-9s", "\x1b[31m", "[/]", "s3://KEY:SECRET@bucket/runs", 10**39]
UNIT_NUMBER = re.compile(r"([0-9]*\.?[0-9]+)\s*([a-zA-Z/]+)")
PLAN_MAX_NODES = 200  # larger scenarios are validated only: planning thousands of nodes takes seconds
SECONDS_PER_INPUT = 2.0 * float(os.environ.get("PEERLAB_TEST_TIME_SCALE") or 1)
REFUSAL_LINES = bounded.MAX_PROBLEMS + 6  # a header, the problems, "... more", and admission's figures


class Hang(Exception):
    pass


def hostile_files(folder: Path) -> list[str]:
    """Files a data path may name, made in `folder` (the scenario's directory): names relative to it."""
    made = {
        "empty.csv": b"",
        "garbage.bin": bytes(random.Random(1).randrange(256) for _ in range(4096)),
        "nan.csv": b"id,latitude,longitude\n1,nan,inf\n2,1e308,-1e308\n",
        "pings.csv": b"source,destination,min,avg,max,mdev\n1,2,0,nan,0,0\n2,1,0,-1,0,0\n1,1,0,5,0,0\n",
        "trace.csv": b"0,n0,down\n-1,n99,up\nnan,n1,sideways\n1e308,,\n",
        "ragged.json": b"[[0, 1], [1, 0, 3], []]",
        "nanmatrix.json": b"[[0, NaN], [Infinity, 0]]",
        "deep.json": b"[" * 5000 + b"]" * 5000,
        "text.json": b'"not a matrix"',
    }
    for name, data in made.items():
        (folder / name).write_bytes(data)
    os.mkfifo(folder / "fifo")
    (folder / "a-directory").mkdir()
    (folder / "shadow-link").symlink_to("/etc/shadow")
    (folder / "zero-link").symlink_to("/dev/zero")
    os.link(folder / "garbage.bin", folder / "hard-link")
    with open(folder / "huge.csv", "wb") as f:  # sparse: over the 64 MiB limit without the disk
        f.truncate(65 * 2**20)
    return [*made, "fifo", "a-directory", "shadow-link", "zero-link", "hard-link", "huge.csv", "/dev/zero",
            "/etc/shadow", "missing.csv", "../../../../etc/passwd"]


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a loaded YAML document (dict keys and list indexes), containers included."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _numeric(value: Any) -> bool:
    """A number, or a number with a unit (`20ms`, `4/s`, `50mbit`, `2KiB`)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
        isinstance(value, str) and bool(UNIT_NUMBER.fullmatch(value)))


def _scaled(value: Any, factor: float) -> Any:
    if isinstance(value, str):
        m = UNIT_NUMBER.fullmatch(value)
        return f"{float(m.group(1)) * factor:g}{m.group(2)}"
    return type(value)(value * factor) if isinstance(value, int) else value * factor


def _set(doc: Any, path: tuple, value: Any, delete: bool = False) -> None:
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def _ensure(doc: dict, path: tuple) -> dict:
    for key in path[:-1]:
        if not isinstance(doc.get(key), dict):
            doc[key] = {}
        doc = doc[key]
    return doc


def mutate(base: dict, rng: random.Random, files: list[str]) -> str:
    """One fuzz input: a mutated copy of `base`, as YAML text."""
    doc = copy.deepcopy(base)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        kind = rng.random()
        leaves = [p for p in paths if _numeric(_get(doc, p))]
        if kind < 0.4 and leaves:  # a value of the right kind, scaled: valid more often, so planning runs too
            path = rng.choice(leaves)
            _set(doc, path, _scaled(_get(doc, path), rng.choice([0, 0.01, 0.5, 2, 3, 10, 100, -1])))
        elif kind < 0.55 and paths:
            _set(doc, rng.choice(paths), None, delete=True)
        elif kind < 0.75 and paths:
            value = rng.choice(VALUES) if rng.random() < 0.8 else rng.randint(-10**6, 10**6)
            _set(doc, rng.choice(paths), copy.deepcopy(value))
        elif kind < 0.9:
            field = rng.choice(DATA_FIELDS)
            parent = _ensure(doc, field)
            if field[0] == "network" and rng.random() < 0.7:
                parent["model"] = "matrix" if field[-1] == "path" else "wonderproxy"
            parent[field[-1]] = rng.choice(files) if rng.random() < 0.8 else rng.choice(VALUES)
        else:
            target = _ensure(doc, (*rng.choice(paths or [("x",)]), "x")) if paths and rng.random() < 0.5 else doc
            if isinstance(target, dict):
                target[rng.choice(["unknown", "nodes", "x-extra", "matrix", "faults", "attackers"])] = rng.choice(VALUES)
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    if rng.random() < 0.1:  # the YAML itself: cut, or a byte changed
        cut = rng.randrange(len(text) or 1)
        text = text[:cut] if rng.random() < 0.5 else text[:cut] + rng.choice(["\t", ":", "- ", "{", "'", "\x00", "&a *a"]) + text[cut + 1:]
    elif rng.random() < 0.18:  # the text: keys twice, anchors, matrices, escapes, huge numbers, nesting
        text = text_mutation(text, rng)
    return text


def bases() -> list[dict]:
    """The repository's scenarios, loaded, with node counts cut to at most 40."""
    out = []
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        doc = bounded.load_yaml(path.read_text())
        nodes = doc.get("nodes") if isinstance(doc, dict) else None
        if isinstance(nodes, dict) and isinstance(nodes.get("count"), int) and nodes["count"] > 40:
            nodes["count"] = 40
            nodes.pop("groups", None)  # their counts must add up to the total
        out.append(doc)
    return out


def _call(argv: list[str]) -> tuple[int, str]:
    """`peerlab ARGV` in this process: (exit code, what it printed); an exception escapes."""
    from orchestrator.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    return code, out.getvalue()


def problem(code: int, output: str) -> str | None:
    """What is wrong with how one input ended, or None."""
    if code not in (0, 2):
        return f"exit code {code}"
    if "Traceback" in output:
        return "a traceback in the output"
    if any(not (c.isprintable() or c in " \n") for c in output):
        return "a control character in the output"
    if code == 2:
        lines = [x for x in output.splitlines() if x.strip()]
        if not lines:
            return "refused without a word"
        if len(lines) > REFUSAL_LINES:
            return f"a refusal of {len(lines)} lines"
        if max(map(len, lines)) > bounded.LINE_WIDTH + 210:  # a problem line, or its header (source: 200)
            return f"a refusal line of {max(map(len, lines)):,} characters"
        detail = [x for x in lines[1:] if x.startswith("  ")]
        if lines[0].startswith("scenario ") and any(": " not in x for x in detail):
            return "a problem line that names no field"
    return None


def check(path: Path, extra: list[str] = ()) -> tuple[int, str | None]:
    """Validate, then (for a small valid scenario) plan, the scenario file `path` (with the options
    `extra`): the exit code, and what went wrong or None."""
    code, output = _call(["validate", str(path), "--data-root", str(path.parent), *extra])
    if code == 0 and _count(path) <= PLAN_MAX_NODES:
        code, output = _call(["plan", str(path), "--data-root", str(path.parent), *extra])
    return code, problem(code, output)


def check_hand_made(argv: list[str]) -> str | None:
    """What is wrong with how a hand-made hostile input ended (it must be refused, saying nothing of
    the file it names), or None."""
    code, output = _call(argv)
    wrong = problem(code, output) or (None if code == 2 else f"exit code {code}, not a refusal")
    if wrong is None and CANARY in output:
        return "the file's content in the output"
    target = Path(argv[1])
    try:
        content = target.read_text(errors="replace")[:20_000] if target.is_file() and os.access(target, os.R_OK) else ""
    except OSError:
        content = ""
    leaked = [x for x in content.splitlines()[:200] if len(x) >= 12 and x in output]
    return wrong or (f"a line of {target} in the output" if leaked else None)


def _count(path: Path) -> int:
    try:
        doc = bounded.load_yaml(path.read_text())
        return int(doc["nodes"]["count"])
    except Exception:  # noqa: BLE001 - validate accepted it: anything odd here just means "do not plan"
        return PLAN_MAX_NODES + 1


def _alarm(*_: Any) -> None:
    raise Hang(f"no answer within {SECONDS_PER_INPUT:g} s")


def _timed(call: Any, *args: Any) -> tuple[Any, str | None, float]:
    """call(*args) within SECONDS_PER_INPUT: (its result or None, what escaped or None, seconds)."""
    signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_INPUT)
    start = time.perf_counter()
    try:
        return call(*args), None, time.perf_counter() - start
    except (Exception, SystemExit, Hang) as err:  # noqa: BLE001 - any escape is what we count
        where = traceback.extract_tb(err.__traceback__)[-1]
        kind = f"{type(err).__name__} at {Path(where.filename).name}:{where.lineno}"
        return None, f"{kind}: {err}\n{traceback.format_exc()[-3000:]}", time.perf_counter() - start
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run(inputs: int, seed: int = 0) -> dict[str, Any]:
    """The hand-made classes, then `inputs` mutated scenarios; prints the first input of each kind of
    crash (up to 5 kinds) and its error to stderr; returns how many inputs were accepted, refused,
    and crashed, how many hand-made classes there were, and the slowest input's seconds."""
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))  # a runaway allocation is a crash, not the machine's end
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(seed)
    counts: dict[str, Any] = {"accepted": 0, "refused": 0, "crashes": 0, "hand_made": 0, "slowest": 0.0}
    shown: set[str] = set()
    docs = bases()
    quickstart = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    with tempfile.TemporaryDirectory(prefix="peerlab-scenario-fuzz-") as tmp:
        folder = Path(tmp)
        files = hostile_files(folder)
        (folder / "warm.yaml").write_text(quickstart)
        _call(["validate", str(folder / "warm.yaml")])  # imports and schema building: not an input's time
        for what, argv in hand_made(folder / "a-directory", quickstart):
            wrong, escaped, took = _timed(check_hand_made, argv)
            counts["hand_made"] += 1
            counts["slowest"] = max(counts["slowest"], took)
            if wrong or escaped:
                counts["crashes"] += 1
                print(f"hand-made {what!r} (peerlab {' '.join(a[:80] for a in argv)}): {wrong or escaped}", file=sys.stderr)
        for i in range(inputs):
            text = mutate(rng.choice(docs), rng, files)
            extra = extra_args(rng)
            path = folder / "s.yaml"
            path.write_text(text)
            result, escaped, took = _timed(check, path, extra)
            counts["slowest"] = max(counts["slowest"], took)
            kind = escaped.split(":")[0] if escaped else ""
            wrong = escaped
            if result is not None:
                code, wrong = result
                counts["accepted" if code == 0 else "refused"] += not wrong
            if wrong:
                counts["crashes"] += 1
                kind = kind or wrong.splitlines()[0]
                if kind not in shown and len(shown) < 5:  # the first input of each kind of crash
                    shown.add(kind)
                    print(f"input {i} (seed {seed}): {wrong}\n--- the scenario (options {extra!r}):\n"
                          f"{bounded.shown(text, 4000)}", file=sys.stderr)
            if (i + 1) % 1000 == 0:
                print(f"  {i + 1:,} scenarios, {counts['crashes']} crashes", file=sys.stderr, flush=True)
    return counts


def main(argv: list[str]) -> int:
    inputs = int(argv[0]) if argv else 1000
    seed = int(argv[1]) if len(argv) > 1 else 0
    counts = run(inputs, seed)
    print(f"decoder=scenario frames={inputs} crashes={counts['crashes']} engine=mutation seed={seed} "
          f"accepted={counts['accepted']} refused={counts['refused']} hand_made={counts['hand_made']} "
          f"slowest={counts['slowest']:.2f}", flush=True)
    return 1 if counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
