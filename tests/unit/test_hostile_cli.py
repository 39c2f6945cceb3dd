"""What a hostile user tried (issue 64), through the real CLI: each input is refused with exit 2 in about
a second, naming the field, in a few short printable lines without the file's content; a FIFO or
/dev/zero does not block; `plan` refuses what `run` refuses, as fast; Rich markup in an error text or
a matrix label is printed as text, not a crash."""
from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from orchestrator.cli.common import said
from tests.support.cli import ROOT, peerlab

QUICKSTART = (ROOT / "scenarios" / "quickstart.yaml").read_text()
CANARY = "CANARY-5d1c"


def refused(done, *says: str) -> str:
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert "Traceback" not in out and all(s in out for s in says), out[-3000:]
    assert all(c.isprintable() or c in " \n" for c in out), repr(out[:500])
    assert len(out) < 2000 and len(out.splitlines()) <= 12, out[:3000]
    return out


@pytest.mark.slow
def test_a_fifo_or_a_device_as_the_scenario_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "s.yaml")  # before: `validate` blocked on it forever; the timeout ends a regression
    refused(peerlab("validate", str(tmp_path / "s.yaml"), timeout=60), "(file)", "not a regular file")
    refused(peerlab("plan", "/dev/zero", timeout=60), "/dev/zero is not a regular file")  # was MemoryError
    refused(peerlab("validate", "/proc/self/status", timeout=60), "a file of /proc")


@pytest.mark.parametrize("name, text, says", [
    ("dup", "name: d\nnodes:\n  count: 2\n  count: 3\n", "nodes.count: given twice"),
    ("int", "name: b\nnodes: {count: " + "9" * 5000 + "}\n", "nodes.count: a whole number of 5,000 characters"),
    ("nest", QUICKSTART + "x: " + "[" * 1000 + "]" * 1000 + "\n", "(yaml)"),
    ("not", "".join(f"{CANARY}-user{i}: {CANARY}-hash{i}\n" for i in range(40)), "not a scenario"),
    ("anchors", QUICKSTART + "matrix:\n  seed: &v [" + ", ".join(map(str, range(16))) + "]\n"
     + "".join(f"  {p}: *v\n" for p in ("topics.count", "workload.publishers", "network.jitter", "workload.warmup")),
     "1,048,576 combinations; at most 100"),
    ("escape", QUICKSTART + '"\\e[31m\\e]0;pwned\\a": 1\n', "\\x1b[31m\\x1b]0;pwned\\x07: unknown field"),
    ("name", "name: " + "x" * 2**20 + "\nnodes: {count: 2}\n", "name: String should match pattern"),
    ("s3", QUICKSTART.replace("file://./runs", f"s3://AKIA:{CANARY}@bucket/runs"), "AWS_SECRET_ACCESS_KEY"),
    ("churn", QUICKSTART + "churn: {fraction: 0.5, session: {mean: 1ns}}\n", "churn.session.mean"),
])
@pytest.mark.slow
def test_hostile_scenarios_are_refused_in_a_few_printable_lines(tmp_path, name, text, says):
    (tmp_path / "s.yaml").write_text(text)
    out = refused(peerlab("validate", str(tmp_path / "s.yaml"), timeout=60), says)
    assert CANARY not in out


def test_a_matrix_of_100_x_10_x_100_on_the_command_line_is_refused_before_it_is_built():
    done = peerlab("validate", "scenarios/quickstart.yaml", "--matrix", "seed=" + ",".join(map(str, range(1, 101))),
                   "--matrix", "workload.publishers=" + ",".join(map(str, range(1, 11))),
                   "--matrix", "topics.count=" + ",".join(map(str, range(1, 101))), timeout=60)
    refused(done, "100 x 10 x 100 values give 100,000 combinations; at most 100")


@pytest.mark.slow
def test_plan_refuses_nan_in_a_latency_matrix_and_a_churn_of_nanoseconds(tmp_path):
    (tmp_path / "m.json").write_text("[[0, NaN, 1], [Infinity, 0, 1], [1, 1, 0]]")
    (tmp_path / "s.yaml").write_text("name: m\nnodes: {count: 3}\nnetwork: {latency: {model: matrix, path: m.json}}\n")
    refused(peerlab("plan", str(tmp_path / "s.yaml"), timeout=60), "network.latency.path", "not a finite number")
    refused(peerlab("run", str(tmp_path / "s.yaml"), "--backend", "sim", "--no-report", timeout=60),
            "network.latency.path")  # it crashed the simulator
    (tmp_path / "c.yaml").write_text(QUICKSTART + "churn: {fraction: 0.5, session: {mean: 1ns}}\n")
    refused(peerlab("plan", str(tmp_path / "c.yaml"), timeout=60), "churn.session.mean")  # planning never ended


def test_plan_refuses_what_run_refuses_as_fast():
    """5000 local nodes: `run` refuses them at admission; `plan` took 43 s and 1.5 GB to plan them."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = peerlab("plan", "scenarios/quickstart.yaml", "--set", "nodes.count=5000", timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = refused(done, "5000 nodes do not fit this machine", "--force")
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 10, out  # no plan was made


def test_credentials_in_a_report_url_are_refused_unprinted():
    done = peerlab("report", f"s3://AKIA:{CANARY}@bucket/runs/20261121-120000-x-1a2b3c", timeout=60)
    assert CANARY not in refused(done, "a store URL holds no credentials", "~/.aws/credentials")


def test_said_escapes_markup_and_control_characters():
    from io import StringIO

    from rich.console import Console

    out, text = StringIO(), "[/] [/:] [bold]x[/bold] \x1b[31m"
    Console(file=out, width=200).print(f"[bold red]error:[/] {said(text)}")
    assert out.getvalue() == "error: [/] [/:] [bold]x[/bold] \\x1b[31m\n"


def test_rich_markup_in_a_matrix_label_is_printed_as_text(tmp_path):
    """`[/]` in a matrix label was a Rich MarkupError (a traceback) in `peerlab run --backend sim`."""
    small = (QUICKSTART.replace("count: 30\n", "count: 3\n").replace("count: 5\n", "count: 1\n")
             .replace("publishers: 10", "publishers: 1").replace("duration: 15s", "duration: 1s")
             .replace("file://./runs", f"file://{tmp_path}/runs"))
    (tmp_path / "s.yaml").write_text(small + "matrix: {topics.names: [['/'], ['[bold]x']]}\n")
    done = peerlab("run", str(tmp_path / "s.yaml"), "--backend", "sim", "--no-report", timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "matrix 1/2: topics.names=[/]" in done.stderr and "topics.names=['[bold]x']" in done.stderr, done.stderr


@pytest.mark.slow
def test_rich_markup_in_a_store_error_is_printed_as_text(tmp_path):
    """An S3 error naming an endpoint with `[/:]` was a Rich MarkupError (a traceback) in `peerlab run`."""
    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9/[/:]", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "y"}
    done = peerlab("run", "scenarios/quickstart.yaml", "--backend", "sim", "--no-report", "--set",
                   "output.store=s3://bucket/runs", timeout=120, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "127.0.0.1:9/[/:]" in done.stderr, done.stderr


def test_plan_has_the_backend_and_force_of_run(tmp_path: Path):
    done = peerlab("plan", "scenarios/quickstart.yaml", "--backend", "sim", timeout=60)
    assert done.returncode == 0 and "scenario quickstart" in done.stdout, done.stderr
