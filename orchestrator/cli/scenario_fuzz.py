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
garbage bytes, CSVs and matrices of the wrong shape or with NaN. The generator is seeded: a crash
report names the seed and input number, and `--seed` replays it.

    python -m orchestrator.cli.scenario_fuzz INPUTS [SEED]
        one line: decoder=scenario frames=N crashes=K engine=mutation seed=S accepted=A refused=R
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
import traceback
from pathlib import Path
from typing import Any

import yaml

from orchestrator.paths import ROOT

DATA_FIELDS = (("network", "latency", "path"), ("network", "latency", "servers"),
               ("network", "latency", "pings"), ("churn", "trace"))
VALUES: list[Any] = [None, True, False, 0, -1, 1, 2**64, -(2**63), 1e308, -1e-300, math.nan, math.inf, -math.inf,
                     "", " ", "x" * 5000, "🙂", "nan", "inf", "-5ms", "1e999s", "10/0s", "0x10", "..", "/etc/shadow",
                     "file:///etc", "s3://", "{{}}", "%s%n", "\x00", "a\nb", [], {}, [None], [[]], {"x": 1},
                     [1, "a", None], {"model": "matrix"}, 5000, 100_001, 0.5, "50mbit", "1/0s", "-1/s", "1e400KiB"]
UNIT_NUMBER = re.compile(r"([0-9]*\.?[0-9]+)\s*([a-zA-Z/]+)")
PLAN_MAX_NODES = 200  # larger scenarios are validated only: planning thousands of nodes takes seconds
SECONDS_PER_INPUT = 20


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
    return text


def bases() -> list[dict]:
    """The repository's scenarios, loaded, with node counts cut to at most 40."""
    out = []
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
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
    if code == 2:
        lines = [x for x in output.splitlines() if x.strip()]
        if not lines:
            return "refused without a word"
        detail = [x for x in lines[1:] if x.startswith("  ")]
        if lines[0].startswith("scenario ") and any(": " not in x for x in detail):
            return "a problem line that names no field"
    return None


def check(path: Path) -> tuple[int, str | None]:
    """Validate, then (for a small valid scenario) plan, the scenario file `path`: the exit code, and
    what went wrong or None."""
    code, output = _call(["validate", str(path), "--data-root", str(path.parent)])
    if code == 0 and _count(path) <= PLAN_MAX_NODES:
        code, output = _call(["plan", str(path), "--data-root", str(path.parent)])
    return code, problem(code, output)


def _count(path: Path) -> int:
    try:
        doc = yaml.safe_load(path.read_text())
        return int(doc["nodes"]["count"])
    except Exception:  # noqa: BLE001 - validate accepted it: anything odd here just means "do not plan"
        return PLAN_MAX_NODES + 1


def _alarm(*_: Any) -> None:
    raise Hang(f"no answer within {SECONDS_PER_INPUT} s")


def run(inputs: int, seed: int = 0) -> dict[str, int]:
    """Fuzz `inputs` scenarios; prints the first input of each kind of crash (up to 5 kinds) and its
    error to stderr; returns how many inputs were accepted, refused, and crashed."""
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))  # a runaway allocation is a crash, not the machine's end
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(seed)
    counts, shown = {"accepted": 0, "refused": 0, "crashes": 0}, set()
    docs = bases()
    with tempfile.TemporaryDirectory(prefix="peerlab-scenario-fuzz-") as tmp:
        folder = Path(tmp)
        files = hostile_files(folder)
        for i in range(inputs):
            text = mutate(rng.choice(docs), rng, files)
            path = folder / "s.yaml"
            path.write_text(text)
            signal.alarm(SECONDS_PER_INPUT)
            kind = ""
            try:
                code, wrong = check(path)
                counts["accepted" if code == 0 else "refused"] += not wrong
            except (Exception, SystemExit, Hang) as err:  # noqa: BLE001 - any escape is what we count
                where = traceback.extract_tb(err.__traceback__)[-1]
                kind = f"{type(err).__name__} at {Path(where.filename).name}:{where.lineno}"
                wrong = f"{type(err).__name__}: {err}\n{traceback.format_exc()[-3000:]}"
            finally:
                signal.alarm(0)
            if wrong:
                counts["crashes"] += 1
                kind = kind if wrong.startswith(kind.split()[0]) else wrong.splitlines()[0]
                if kind not in shown and len(shown) < 5:  # the first input of each kind of crash
                    shown.add(kind)
                    print(f"input {i} (seed {seed}): {wrong}\n--- the scenario:\n{text[:4000]}", file=sys.stderr)
            if (i + 1) % 1000 == 0:
                print(f"  {i + 1:,} scenarios, {counts['crashes']} crashes", file=sys.stderr, flush=True)
    return counts


def main(argv: list[str]) -> int:
    inputs = int(argv[0]) if argv else 1000
    seed = int(argv[1]) if len(argv) > 1 else 0
    counts = run(inputs, seed)
    print(f"decoder=scenario frames={inputs} crashes={counts['crashes']} engine=mutation seed={seed} "
          f"accepted={counts['accepted']} refused={counts['refused']}", flush=True)
    return 1 if counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
