"""Bounded input (orchestrator/model/bounded.py, limits.py; issue 64), in this process: files are read
only when regular and within their limit, YAML is parsed by libyaml and refused past its bounds
(a key twice, 5000-digit numbers, deep nesting, a billion laughs), matrices are counted before they are
built, churn and the other generators are bounded before planning, a latency matrix with NaN or
Infinity is refused naming its field, and a refusal's text is short, printable and holds no
credentials. The real CLI's exit codes and output are in test_hostile_cli.py."""
from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.model import bounded, churn, limits
from orchestrator.model.matrix import expand
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, load_scenario, parse_scenario
from orchestrator.model.sections import Churn
from tests.support.cli import ROOT

QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()
SMALL = QUICKSTART.replace("count: 30\n", "count: 4\n").replace("publishers: 10", "publishers: 2")


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail, not hang, if the body blocks (opening a FIFO waits for a writer): SIGALRM interrupts it."""
    def expired(*_):
        raise TimeoutError(f"blocked for {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refusal(text: str, *overrides: str, plan: bool = False) -> str:
    with pytest.raises(ScenarioError) as err:
        sc = parse_scenario(text, overrides=list(overrides))
        if plan:
            make_plan(sc)
    return str(err.value)


# files -------------------------------------------------------------------------------------------

def test_only_a_regular_file_of_at_most_the_limit_is_read(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opened, it would block until a writer came: it is never opened
    (tmp_path / "small.yaml").write_text("name: x\n")
    with open(tmp_path / "big.yaml", "wb") as f:
        f.truncate(bounded.MAX_SCENARIO_BYTES + 1)
    cases = {str(tmp_path / "fifo"): "not a regular file", "/dev/zero": "not a regular file",
             str(tmp_path): "not a regular file", "/proc/self/status": "a file of /proc",
             str(tmp_path / "big.yaml"): "the limit is 4.0 MiB"}
    for path, says in cases.items():
        with deadline(10), pytest.raises(ValueError, match=says):
            bounded.read_regular(path, bounded.MAX_SCENARIO_BYTES)
    assert bounded.read_regular(tmp_path / "small.yaml", 100) == b"name: x\n"
    with pytest.raises(ValueError, match="the limit is 5 bytes"):
        bounded.read_regular(tmp_path / "small.yaml", 5)


def test_a_scenario_file_is_read_through_the_bounds(tmp_path):
    with open(tmp_path / "big.yaml", "wb") as f:
        f.write(b"name: big\n")
        f.truncate(5 * 2**20)
    with pytest.raises(ScenarioError, match="a scenario is a YAML file of at most 4 MiB"):
        load_scenario(tmp_path / "big.yaml")
    with pytest.raises(ScenarioError, match="not a regular file"):
        load_scenario("/dev/zero")


# YAML --------------------------------------------------------------------------------------------

def test_the_loader_is_libyaml_and_reads_every_scenario_as_safe_load_does():
    assert bounded.C_LOADER and any(c.__name__ == "CParser" for c in bounded.BoundedLoader.__mro__)
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        text = path.read_text()
        assert bounded.load_yaml(text) == yaml.safe_load(text), path
    merged = "base: &b {x: 1, y: 2}\nd: {<<: *b, x: 3}\nl: &l [1, 2]\nm: [*l, *l]\n"
    assert bounded.load_yaml(merged) == yaml.safe_load(merged)  # a merge key overriding is no duplicate


def test_a_key_given_twice_is_refused_naming_its_field():
    said = refusal("name: d\nnodes:\n  count: 2\n  count: 3\n")
    assert "nodes.count: given twice, on lines 3 and 4" in said, said
    assert "given twice" in refusal(QUICKSTART, "topics={count: 2, count: 3}")  # a --set value too
    with pytest.raises(bounded.YamlRefused, match="1: given twice"):
        bounded.load_yaml("1: a\n0x1: b\n")  # one key, as the loader constructs it


@pytest.mark.parametrize("text, says", [
    ("name: b\nnodes: {count: " + "9" * 5000 + "}\n", "nodes.count: a whole number of 5,000 characters; at most 40"),
    ("x: " + "[" * 1000 + "]" * 1000 + "\n", "nesting depth"),  # libyaml's own limit on flow nesting
    ("x:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(70)) + " " * 71 + "v: 1\n", "nested more than 64 deep"),
    ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)),
     "more than 1,000,000 values once its aliases are expanded"),
    ("x: &a [1, *a]\n", "x[1]: an alias to a value that contains it"),
])
def test_yaml_past_its_bounds_is_refused_at_once(text, says):
    start = time.process_time()
    said = refusal("name: y\nnodes: {count: 2}\n" + text if not text.startswith("name") else text)
    assert says in said and time.process_time() - start < 1, said


# matrices and generators ---------------------------------------------------------------------------

def test_matrix_combinations_are_counted_before_they_are_built(tmp_path):
    anchors = QUICKSTART + "matrix:\n  seed: &v [" + ", ".join(map(str, range(16))) + "]\n" + "".join(
        f"  {p}: *v\n" for p in ("topics.count", "workload.publishers", "network.jitter", "workload.warmup",
                                 "calibration.pairs"))
    (tmp_path / "m.yaml").write_text(anchors)
    start = time.process_time()
    with pytest.raises(ScenarioError, match=r"16,777,216 combinations; at most 100 \(each is a run\)"):
        expand(tmp_path / "m.yaml")
    (tmp_path / "q.yaml").write_text(QUICKSTART)
    with pytest.raises(ScenarioError, match="100 x 10 x 100 values give 100,000 combinations; at most 100"):
        expand(tmp_path / "q.yaml", matrix_args=["seed=" + ",".join(map(str, range(1, 101))),
                                                 "workload.publishers=" + ",".join(map(str, range(1, 11))),
                                                 "topics.count=" + ",".join(map(str, range(1, 101)))])
    assert time.process_time() - start < 2
    at_limit = expand(tmp_path / "q.yaml", matrix_args=["seed=" + ",".join(map(str, range(1, 11))),
                                                        "workload.publishers=" + ",".join(map(str, range(1, 11)))])
    assert len(at_limit) == limits.MAX_COMBINATIONS
    pinned = expand(tmp_path / "m.yaml", overrides=[f"{p}=1" for p in ("seed", "topics.count", "workload.publishers",
                                                                      "network.jitter", "workload.warmup")])
    assert len(pinned) == 16  # --set pins all but one path


def test_a_churn_session_of_a_nanosecond_is_refused_by_validate():
    said = refusal(QUICKSTART + "churn: {fraction: 0.5, session: {mean: 1ns}}\n")
    assert "churn.session.mean" in said and "at most 100,000" in said, said
    parse_scenario((ROOT / "scenarios" / "churn-gossipsub.yaml").read_text())  # the shipped one is far below


def test_the_session_model_stops_at_the_limit_whatever_it_draws(monkeypatch):
    monkeypatch.setattr(limits, "MAX_TIMELINE_EVENTS", 50)
    model = Churn(fraction=1.0, session={"mean": "1s", "distribution": "weibull", "shape": 0.2})
    with pytest.raises(churn.ChurnError, match="churn.session: the sessions drawn give more than 50"):
        churn.session_model(model, random.Random(1), [f"n{i}" for i in range(20)], [], 100.0, 110.0)


@pytest.mark.parametrize("extra, count, field", [
    ("faults:\n" + "  - {at: 1, action: kill, sample: 1000, restart_after: 1}\n" * 60, 1000, "faults: 120,000"),
    ("", 5000, "topics.count: 5,000 nodes each drawing from 100,000 topics"),
])
def test_faults_and_subscriptions_are_bounded_before_planning(extra, count, field):
    text = QUICKSTART.replace("count: 30\n", f"count: {count}\n")
    if "topics" in field:
        text = text.replace("count: 5\n", "count: 100000\n")
    assert field in refusal(text + extra)


def test_a_churn_trace_of_too_many_events_is_refused_naming_it(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("".join(f"{i / 1e5:.5f},n{i % 4},{'down' if i % 8 < 4 else 'up'}\n"
                             for i in range(limits.MAX_TIMELINE_EVENTS + 8)))
    (tmp_path / "s.yaml").write_text(SMALL + "churn: {trace: trace.csv}\n")
    with pytest.raises(ScenarioError, match="churn.trace: .* more than 100,000 events"):
        make_plan(load_scenario(tmp_path / "s.yaml"))


@pytest.mark.parametrize("name, content, field", [
    ("m.json", "[[0, NaN, 1], [1, 0, 1], [1, 1, 0]]", "network.latency.path"),
    ("m.json", "[[0, 1, 1], [Infinity, 0, 1], [1, 1, 0]]", "network.latency.path"),
    ("m.csv", "0,1,-inf\n1,0,1\n1,1,0\n", "network.latency.path"),
    ("m.csv", "0,1,1e300\n1,0,1\n1,1,0\n", "network.latency.path"),
])
def test_a_latency_matrix_with_nan_or_infinity_is_refused_naming_the_field(tmp_path, name, content, field):
    (tmp_path / name).write_text(content)
    (tmp_path / "s.yaml").write_text(SMALL.replace("count: 4\n", "count: 3\n").replace("publishers: 2", "publishers: 1")
                                     .replace("latency: {model: constant, one_way: 50ms}",
                                              f"latency: {{model: matrix, path: {name}}}"))
    with pytest.raises(ScenarioError) as err:
        make_plan(load_scenario(tmp_path / "s.yaml"))
    assert field in str(err.value) and ("finite" in str(err.value) or "over 1e+06 ms" in str(err.value)), str(err.value)


def test_wonderproxy_coordinates_that_are_not_finite_are_refused(tmp_path):
    (tmp_path / "servers.csv").write_text("id,name,latitude,longitude\n1,a,nan,0\n2,b,1,1\n")
    (tmp_path / "pings.csv").write_text("source,destination,min,avg,max,mdev\n1,2,0,5,0,0\n")
    (tmp_path / "s.yaml").write_text(SMALL.replace("count: 4\n", "count: 2\n").replace("publishers: 2", "publishers: 1")
                                     .replace("latency: {model: constant, one_way: 50ms}",
                                              "latency: {model: wonderproxy, servers: servers.csv, pings: pings.csv}"))
    with pytest.raises(ScenarioError, match="network.latency.servers: .* line 2, column latitude: not a finite"):
        make_plan(load_scenario(tmp_path / "s.yaml"))


# the text of a refusal -----------------------------------------------------------------------------

def test_shown_escapes_control_characters_and_cuts_long_values():
    assert bounded.shown("a\x1b[31mb\x07\n\u202e") == "a\\x1b[31mb\\x07\\n\\u202e"
    assert bounded.shown("x" * 1000) == "x" * 79 + "…" and len(bounded.shown("é" * 100, 10)) == 10
    assert bounded.mask_credentials("s3://AKIA:SECRET@bucket/runs and file://u@/x") == "s3://***@bucket/runs and file://***@/x"
    lines = bounded.refusal_lines([f"f{i}: unknown field" for i in range(50)])
    assert len(lines) == bounded.MAX_PROBLEMS + 1 and lines[-1] == "... and 42 more problems (fix these first)"


def test_what_a_refusal_says_is_short_printable_and_not_the_files_content():
    said = refusal("name: " + "x" * 2**20 + "\nnodes: {count: 2}\n")
    assert len(said) < 400 and "…" in said, said[:500]
    said = refusal(QUICKSTART + '"\\e[31m\\e]0;title\\a": 1\n')
    assert "\x1b" not in said and "\\x1b[31m\\x1b]0;title\\x07: unknown field" in said, said
    said = refusal("".join(f"secret-user{i}: secret-hash{i}\n" for i in range(40)))
    assert "secret" not in said and "not a scenario" in said and len(said.splitlines()) == 2, said
    said = refusal(QUICKSTART + "".join(f"x{i}: 1\n" for i in range(40)))
    assert len(said.splitlines()) == 1 + bounded.MAX_PROBLEMS + 1, said


def test_credentials_in_a_store_url_are_refused_saying_where_they_go():
    for url in ("s3://AKIAKEY:SECRETXYZ@bucket/runs", "s3://SECRETXYZ@bucket", "file://u:SECRETXYZ@/tmp/runs"):
        said = refusal(QUICKSTART, f"output.store={url}")
        assert "output.store: a store URL holds no credentials" in said and "SECRETXYZ" not in said, said
        assert "AWS_ACCESS_KEY_ID" in said and "~/.aws/credentials" in said


def test_no_path_of_the_model_reads_yaml_or_files_but_through_the_bounds():
    """The one reader: nothing under orchestrator/model calls yaml's loaders or reads a file itself."""
    found = []
    for path in (ROOT / "orchestrator" / "model").rglob("*.py"):
        text = path.read_text()
        for needle in ("yaml.safe_load", "yaml.load(", ".read_bytes()", ".read_text()", "open("):
            if needle in text and path.name != "bounded.py":
                found.append(f"{path.relative_to(ROOT)}: {needle}")
    assert found == [], found


def test_the_one_reader_of_data_files_is_the_bounded_one(tmp_path: Path):
    from orchestrator.model import data_files

    os.mkfifo(tmp_path / "pipe")
    with deadline(10), pytest.raises(ValueError, match="not a regular file"):
        data_files.read_bytes(str(tmp_path / "pipe"))
    (tmp_path / "ok.csv").write_text("0,1\n1,0\n")
    assert data_files.read_text(str(tmp_path / "ok.csv")) == "0,1\n1,0\n"
