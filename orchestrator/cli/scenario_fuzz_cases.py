"""The hostile inputs of the scenario fuzz (orchestrator/cli/scenario_fuzz.py) beyond its mutated
values: mutations of the YAML text itself (duplicate keys, anchors and aliases, matrices, terminal
escapes, huge numbers, deep nesting, tiny churn sessions, credentials in a store URL), extra command-line
options (`--matrix` and `--set` of every size), and the hand-made classes a hostile user tried (issue 64),
each of which must be refused: exit 2, a few short printable lines, nothing of the file's content.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

CANARY = "CANARY-7f3e"  # put in hostile files' content: no refusal may print it
ESCAPES = ["\x1b[31m", "\x1b]0;pwned\x07", "\x1b[2J", "\x07", "\r", "\u202e", "\x9b31m"]
LINE = re.compile(r"^( *)([A-Za-z_][\w.-]*):( .*)?$", re.M)
NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar of `text` (control characters as escapes YAML reads back)."""
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\x{ord(c):02x}" if ord(c) < 256
                         else f"\\u{ord(c):04x}" for c in text) + '"'


def _matrix(rng: random.Random) -> str:
    """A matrix block whose lists are shared through an anchor: small, or billions of combinations."""
    size = rng.choice([1, 2, 3, 16, 100])
    paths = rng.sample(["seed", "workload.rate", "topics.count", "network.jitter", "workload.message_size",
                        "workload.warmup", "calibration.pairs", "x.unknown"], rng.randint(1, 6))
    values = ", ".join(str(rng.randint(1, 9)) for _ in range(size))
    lines = [f"  {paths[0]}: &v [{values}]"] + [f"  {p}: *v" for p in paths[1:]]
    return "matrix:\n" + "\n".join(lines) + "\n"


def _laughs(levels: int) -> str:
    out = "x-l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n"
    for i in range(1, levels):
        out += f"x-l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n"
    return out


def text_mutation(text: str, rng: random.Random) -> str:
    """One hostile change to a scenario's YAML text."""
    kind = rng.randrange(10)
    lines = list(LINE.finditer(text))
    if kind == 0 and lines:  # a key given twice: the second would silently win
        m = rng.choice(lines)
        return text[:m.end()] + "\n" + m.group(0) + text[m.end():]
    if kind == 1:
        return _matrix(rng) + text.replace("\nmatrix:", "\nx-old-matrix:")
    if kind == 2:
        return text + _laughs(rng.randint(2, 9))
    if kind == 3 and lines:  # a terminal escape in a key or a value
        m = rng.choice(lines)
        escape = _quoted(rng.choice(ESCAPES) + rng.choice(["x", "name", CANARY]))
        if rng.random() < 0.5:
            return text[:m.start()] + f"{m.group(1)}{escape}: 1\n" + text[m.start():]
        return text[:m.start()] + f"{m.group(1)}{m.group(2)}: {escape}" + text[m.end():]
    if kind == 4:  # a huge number where a number was
        numbers = list(NUMBER.finditer(text))
        if numbers:
            m = rng.choice(numbers)
            huge = rng.choice(["9" * 5000, "9" * 41, "1" * 39, "1e999", "-" + "9" * 300, "0x" + "f" * 60])
            return text[:m.start()] + huge + text[m.end():]
    if kind == 5:
        depth = rng.choice([10, 63, 65, 200, 1000, 100_000])
        return text + "x-deep: " + "[" * depth + "]" * depth + "\n"
    if kind == 6:
        return text + "x-deep-block:\n" + "".join(" " * i + f"k{i}:\n" for i in range(rng.choice([30, 70]))) + " " * 70 + "v: 1\n"
    if kind == 7:
        mean = rng.choice(["1ns", "1us", "1ms", "0.1s", "1s", "30s"])
        return text.replace("\nchurn:", "\nx-old-churn:") + f"churn: {{fraction: 0.5, session: {{mean: {mean}}}}}\n"
    if kind == 8:
        return text.replace("\noutput:", "\nx-old-output:") + f"output: {{store: 's3://AKIA{CANARY}:{CANARY}@bucket/runs'}}\n"
    return text.replace("name: ", "name: " + "x" * rng.choice([70, 5000, 300_000]), 1)


def extra_args(rng: random.Random) -> list[str]:
    """Options beside the scenario: none mostly; else a --matrix of any size or an odd --set."""
    r = rng.random()
    if r < 0.85:
        return []
    if r < 0.95:
        out = []
        for path in rng.sample(["seed", "workload.publishers", "topics.count", "network.jitter"], rng.randint(1, 3)):
            out += ["--matrix", f"{path}=" + ",".join(str(v) for v in range(1, rng.choice([2, 3, 10, 100, 1000]) + 1))]
        return out
    return ["--set", rng.choice(["a." * 100 + "b=1", "nodes.count=" + "[" * 500 + "]" * 500, "name=" + "\x1b[31m" * 3,
                                 "nodes.count={a: 1, a: 2}", "churn={fraction: 0.5, session: {mean: 1ns}}"])]


def hand_made(folder: Path, quickstart: str) -> list[tuple[str, list[str]]]:
    """The classes a hostile user tried, made in `folder`: (what, peerlab's arguments), each to be refused."""
    def file(name: str, text: str | bytes) -> str:
        path = folder / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)

    def scenario(name: str, extra: str, base: str = quickstart) -> str:
        return file(name, base + extra)

    small = quickstart.replace("count: 30\n", "count: 4\n").replace("publishers: 10", "publishers: 2")
    fifo = folder / "hand-fifo.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    big = folder / "hand-big.yaml"
    with open(big, "wb") as f:
        f.write(b"name: big\n")
        f.truncate(5 * 2**20)
    matrix = "matrix:\n  seed: &v [" + ", ".join(map(str, range(1, 17))) + "]\n" + "".join(
        f"  {p}: *v\n" for p in ("topics.count", "workload.publishers", "network.jitter", "workload.warmup",
                                 "calibration.pairs", "workload.message_size", "analysis.measure_from"))
    nan = file("hand-nan.json", "[[0, NaN, 1], [Infinity, 0, 1], [1, 1, 0]]")
    inf = file("hand-inf.csv", "0,1,inf\n1,0,1\n1,1,0\n")
    trace = file("hand-trace.csv", "".join(f"{i / 1e5:.5f},n{i % 4},{'down' if i % 8 < 4 else 'up'}\n"
                                           for i in range(100_008)))
    latency = "network:\n  latency: {model: matrix, path: %s}\n"
    cases = [
        ("a FIFO as the scenario", ["validate", str(fifo)]),
        ("/dev/zero as the scenario", ["validate", "/dev/zero"]),
        ("plan of /dev/zero", ["plan", "/dev/zero"]),
        ("a file of /proc", ["validate", "/proc/self/environ"]),
        ("a directory", ["validate", str(folder)]),
        ("a 5 MiB scenario", ["validate", str(big)]),
        ("a matrix of anchors: 16^8 combinations", ["validate", scenario("hand-anchors.yaml", matrix)]),
        ("--matrix 100 x 10 x 100", ["validate", scenario("hand-q.yaml", ""),
                                     "--matrix", "seed=" + ",".join(map(str, range(1, 101))),
                                     "--matrix", "workload.publishers=" + ",".join(map(str, range(1, 11))),
                                     "--matrix", "topics.count=" + ",".join(map(str, range(1, 101)))]),
        ("a churn session of 1 ns (validate)", ["validate", scenario("hand-churn.yaml", "churn: {fraction: 0.5, session: {mean: 1ns}}\n")]),
        ("a churn session of 1 ns (plan)", ["plan", str(folder / "hand-churn.yaml")]),
        ("a key given twice", ["validate", file("hand-dup.yaml", "name: d\nnodes:\n  count: 2\n  count: 3\n")]),
        ("a 5000-digit integer", ["validate", file("hand-int.yaml", "name: b\nnodes: {count: " + "9" * 5000 + "}\n")]),
        ("1000 levels of nesting", ["validate", scenario("hand-nest.yaml", "x: " + "[" * 1000 + "]" * 1000 + "\n")]),
        ("70 levels of block nesting", ["validate", scenario("hand-block.yaml", "x:\n" + "".join(
            " " * (i + 1) + f"k{i}:\n" for i in range(70)) + " " * 71 + "v: 1\n")]),
        ("a billion laughs", ["validate", scenario("hand-laughs.yaml", _laughs(9))]),
        ("a file that is not a scenario", ["validate", file("hand-not.yaml", "".join(
            f"{CANARY}-user{i}: {CANARY}-hash{i}\n" for i in range(40)))]),
        ("/etc/shadow as the scenario", ["validate", "/etc/shadow"]),
        ("terminal escapes in a key", ["validate", scenario("hand-esc.yaml", _quoted("\x1b[31m\x1b]0;pwned\x07evil") + ": 1\n")]),
        ("a 1 MB name", ["validate", file("hand-name.yaml", "name: " + "x" * 2**20 + "\nnodes: {count: 2}\n")]),
        ("credentials in an s3:// store", ["validate", scenario("hand-s3.yaml", f"output: {{store: 's3://AKIA{CANARY}:{CANARY}@bucket/runs'}}\n",
                                                                 quickstart.replace("output:\n  store: file://./runs\n", ""))]),
        ("NaN in a latency matrix", ["plan", scenario("hand-nan.yaml", latency % nan, small.replace("network:", "x-network:"))]),
        ("Infinity in a latency CSV", ["plan", scenario("hand-inf.yaml", latency % inf, small.replace("network:", "x-network:"))]),
        ("a churn trace of 100,008 events", ["plan", scenario("hand-trace.yaml", f"churn: {{trace: {trace}}}\n", small)]),
        ("200 faults of 1000 nodes", ["validate", scenario("hand-faults.yaml", "faults:\n" + "  - {at: 1, action: kill, sample: 1000, restart_after: 1}\n" * 200,
                                                           quickstart.replace("count: 30\n", "count: 1000\n"))]),
        ("5000 nodes on 100,000 topics", ["validate", scenario("hand-topics.yaml", "", quickstart.replace("count: 30\n", "count: 5000\n")
                                                               .replace("count: 5\n", "count: 100000\n"))]),
        ("plan of 5000 nodes", ["plan", scenario("hand-5000.yaml", "", quickstart.replace("count: 30\n", "count: 5000\n")
                                                  .replace("rate: 4/s", "rate: 1000/s").replace("1KiB", "1MiB"))]),
        ("NUL bytes", ["validate", file("hand-nul.yaml", b"name: x\x00\nnodes: {count: 2}\n")]),
        ("not UTF-8", ["validate", file("hand-latin1.yaml", b"name: caf\xe9\n")]),
        ("--set 100 parts deep", ["validate", str(folder / "hand-q.yaml"), "--set", "a." * 100 + "b=1"]),
        ("--set of 500 nested lists", ["validate", str(folder / "hand-q.yaml"), "--set", "nodes.count=" + "[" * 500 + "]" * 500]),
        ("--set of a mapping with a key twice", ["validate", str(folder / "hand-q.yaml"), "--set", "topics={count: 2, count: 3}"]),
    ]
    return cases
