"""A scenario's data paths cannot read the machine's files (orchestrator/model/data_files.py): through
the real CLI, a scenario naming a secret outside its directory, a symlink to one, a FIFO, a device or
a 1 GB file is refused with the field and path named and none of the file's bytes printed; relative
paths start at the scenario's directory; --data-root allows a directory outside it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import peerlab

SECRET = "SECRET-MARKER-7f3a,do-not-print"
SCENARIO = """name: confined
nodes: {{count: 3}}
network: {{latency: {{model: matrix, path: {path}}}}}
topics: {{count: 1}}
workload: {{publishers: 1, rate: 1/s, duration: 2s}}
"""


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    scenarios, outside = tmp_path / "scenarios", tmp_path / "elsewhere"
    scenarios.mkdir()
    outside.mkdir()
    (outside / "secret.csv").write_text(SECRET + "\n")
    (outside / "m.json").write_text(json.dumps([[0, 10, 20], [10, 0, 30], [20, 30, 0]]))
    (scenarios / "m.json").write_text(json.dumps([[0, 1, 2], [1, 0, 3], [2, 3, 0]]))
    return {"dir": scenarios, "outside": outside}


def run(layout: dict[str, Path], path: str, *args: str, command: str = "validate", cwd: Path | None = None):
    scenario = layout["dir"] / "s.yaml"
    scenario.write_text(SCENARIO.format(path=path))
    return peerlab(command, str(scenario), *args, timeout=60, cwd=cwd or layout["outside"])


def refused(done, *says: str) -> str:
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "network.latency.path" in out and all(s in out for s in says), out
    assert "SECRET-MARKER" not in out and "Traceback" not in out
    return out


def test_relative_paths_start_at_the_scenario_file_whatever_the_working_directory(layout):
    (layout["outside"] / "m.json").rename(layout["outside"] / "m.json.keep")
    (layout["outside"] / "m.json").write_text(json.dumps([[0, 7, 7], [7, 0, 7], [7, 7, 0]]))  # a decoy in the cwd
    done = run(layout, "m.json", "--json", command="plan", cwd=layout["outside"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["latency_ms"][1][2] == 3.0  # the scenario's matrix, not the cwd's


@pytest.mark.slow
def test_a_file_outside_the_scenario_directory_is_refused_unless_its_root_is_allowed(layout):
    secret = layout["outside"] / "secret.csv"
    refused(run(layout, str(secret)), str(secret), "outside the scenario's directory", "--data-root")
    refused(run(layout, "../elsewhere/secret.csv"), "outside the scenario's directory")
    allowed = run(layout, str(layout["outside"] / "m.json"), "--data-root", str(layout["outside"]))
    assert allowed.returncode == 0, allowed.stderr
    # allowed but not a matrix: the error names the line and column, not the text
    refused(run(layout, str(secret), "--data-root", str(layout["outside"]), command="plan"),
            "line 1, column 1: not a number")


def test_etc_shadow_directly_or_through_a_symlink_is_refused_without_a_byte_of_it(layout):
    (layout["dir"] / "link.csv").symlink_to("/etc/shadow")
    for path in ("/etc/shadow", "link.csv"):
        out = refused(run(layout, path), "outside the scenario's directory")
        assert "root:" not in out


@pytest.mark.slow
def test_a_fifo_a_device_and_a_1gb_file_are_refused_promptly(layout):
    os.mkfifo(layout["dir"] / "pipe.csv")
    refused(run(layout, "pipe.csv"), "pipe.csv is not a regular file")  # and nothing blocked on the FIFO
    refused(run(layout, "/dev/zero", "--data-root", "/dev"), "/dev/zero is not a regular file")
    with open(layout["dir"] / "big.csv", "wb") as f:
        f.truncate(2**30)  # sparse: 1 GiB without the disk
    refused(run(layout, "big.csv"), "big.csv has 1024 MiB", "at most 64 MiB")


# every data-path field of the scenario schema, as a scenario line with {path} where the file goes
FIELDS = {
    "network.latency.path": "network: {{latency: {{model: matrix, path: {path}}}}}",
    "network.latency.servers": "network: {{latency: {{model: wonderproxy, servers: {path}, pings: ok.csv}}}}",
    "network.latency.pings": "network: {{latency: {{model: wonderproxy, servers: ok.csv, pings: {path}}}}}",
    "churn.trace": "churn: {{trace: {path}}}",
}
OTHER = """name: confined
nodes: {{count: 3}}
topics: {{count: 1}}
workload: {{publishers: 1, rate: 1/s, duration: 2s}}
"""


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("how", ["symlink", "hard link", "outside"])
def test_every_data_path_field_refuses_a_file_from_outside_under_any_name(layout, field, how):
    """A symlink and a hard link inside the scenario's directory to a file outside it, and the file's
    own path, are refused for each data-path field, naming the field and never the file's bytes."""
    secret = layout["outside"] / "secret.csv"
    (layout["dir"] / "ok.csv").write_text("id,latitude,longitude\n")
    name = {"symlink": "link.csv", "hard link": "hard.csv", "outside": str(secret)}[how]
    if how == "symlink":
        (layout["dir"] / name).symlink_to(secret)
    elif how == "hard link":
        os.link(secret, layout["dir"] / name)
    scenario = layout["dir"] / "s.yaml"
    scenario.write_text(OTHER.format() + FIELDS[field].format(path=name) + "\n")
    done = peerlab("validate", str(scenario), timeout=60, cwd=layout["outside"])
    out = done.stdout + done.stderr
    assert done.returncode == 2 and field in out, out
    assert ("hard links" if how == "hard link" else "outside the scenario's directory") in out, out
    assert "SECRET-MARKER" not in out and "Traceback" not in out


@pytest.mark.parametrize("store", ["file:///etc/peerlab-runs", "file:///", "file:///usr/../etc/cron.d",
                                   "file:///var/lib/peerlab"])
def test_a_file_store_in_a_system_directory_is_refused(tmp_path, store):
    done = peerlab("validate", "scenarios/quickstart.yaml", "--set", f"output.store={store}", timeout=60)
    assert done.returncode == 2 and "output.store" in done.stderr + done.stdout, done.stderr
    assert "system directory" in done.stderr + done.stdout or "root directory" in done.stderr + done.stdout
    assert not Path("/etc/peerlab-runs").exists()


@pytest.mark.slow
def test_a_matrix_or_params_json_nested_too_deep_is_refused_in_one_line(tmp_path):
    """Found by the scenario fuzz (`peerlab fuzz --decoder scenario`, 2026-11-28): JSON arrays nested
    100,000 deep made Python's decoder raise RecursionError, a traceback from `peerlab plan`."""
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.json").write_text(deep)
    (tmp_path / "s.yaml").write_text("name: x\nnodes: {count: 4}\nprotocol: floodsub\n"
                                     "network: {latency: {model: matrix, path: deep.json}}\n")
    plan = peerlab("plan", str(tmp_path / "s.yaml"))
    assert plan.returncode == 2 and "Traceback" not in plan.stderr, plan.stderr[-2000:]
    assert "network.latency.path" in plan.stderr and "nested too deep" in plan.stderr
    checked = peerlab("contract", "interop-check", str(tmp_path / "deep.json"))
    assert checked.returncode == 2 and "Traceback" not in checked.stderr
    assert checked.stderr.strip().splitlines() == [f"error: {tmp_path / 'deep.json'}: not a params.json (JSON nested too deep)"]


@pytest.mark.parametrize("target, named", [("/etc", "/etc"), ("/usr/share", "/usr"), ("/etc/peerlab-runs-absent", "/etc")])
def test_a_file_store_through_a_symlink_into_a_system_directory_is_refused(tmp_path, target, named):
    """A store named under a harmless-looking directory whose symlink leads into a system directory is
    refused by where it leads (the link followed, a chain of links too, and a target not yet made),
    naming the field and the system directory; a link to an ordinary directory is allowed."""
    from orchestrator.model.data_files import check_output_dir
    from orchestrator.model.scenario import ScenarioError, parse_scenario

    (tmp_path / "runs").symlink_to(target)
    (tmp_path / "again").symlink_to(tmp_path / "runs")  # a link to the link
    base = "name: t\nnodes: {count: 4}\n"
    for store in (f"file://{tmp_path}/runs", f"file://{tmp_path}/runs/peerlab", f"file://{tmp_path}/again/x"):
        with pytest.raises(ScenarioError) as refused:
            parse_scenario(base, overrides=[f"output.store={store}"])
        assert f"output.store: {store.removeprefix('file://')} is in the system directory {named}" in str(refused.value)
    with pytest.raises(ValueError, match=f"in the system directory {named}:"):
        check_output_dir(str(tmp_path / "runs"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "ok").symlink_to(tmp_path / "mine")
    assert parse_scenario(base, overrides=[f"output.store=file://{tmp_path}/ok/runs"]).output.store.endswith("/ok/runs")


def test_the_cli_refuses_a_store_symlinked_into_etc_and_creates_nothing_there(tmp_path):
    (tmp_path / "runs").symlink_to("/etc")
    done = peerlab("validate", "scenarios/quickstart.yaml", "--set", f"output.store=file://{tmp_path}/runs/peerlab",
                   timeout=60)
    out = done.stderr + done.stdout
    assert done.returncode == 2 and "output.store" in out and "system directory /etc" in out, out
    assert "Traceback" not in out and not Path("/etc/peerlab").exists()
