"""What a node may do on the local backend: a registered program run as a node is the run's own
unprivileged user, without capabilities, and reaches nothing of the orchestrator's; peerlab's own nodes
run the same way (node/process/privileges.py)."""
import os
import shutil
from pathlib import Path

import pytest

from node.adapters import USER_ADAPTERS_ENV, register
from node.process import privileges
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import parse_scenario
from orchestrator.run.runner import Runner
from tests.emulation.test_interop_contract import SCENARIO, binary, completed, reachable_copy  # noqa: F401

pytestmark = [pytest.mark.emulation, pytest.mark.slow]


PROBER = """#!/bin/sh
# a registered program that tries what a node must not do, says how it went, then runs as a node
scratch=$(dirname "$(dirname "$2")")  # --params <scratch>/configs/<node>.params.json
{
  echo "uid $(id -u)"
  grep -E '^(CapEff|NoNewPrivs)' /proc/self/status
  cat STATE >/dev/null 2>&1 && echo "state file: read" || echo "state file: denied"
  cat MANIFEST >/dev/null 2>&1 && echo "manifest: read" || echo "manifest: denied"
  ls "$scratch/out" >/dev/null 2>&1 && echo "outputs: listed" || echo "outputs: denied"
  cat "$scratch/out/n1.out" >/dev/null 2>&1 && echo "output of n1: read" || echo "output of n1: denied"
  python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' 2>/dev/null \\
    && echo "raw socket: opened" || echo "raw socket: denied"
  ip link set eth0 down 2>/dev/null && echo "own link: changed" || echo "own link: denied"
} > RESULTS
exec BINARY "$@"
"""


class Privileges(Runner):
    """Reads each node process's credentials once the nodes run (/proc/<pid>/status): peerlab's own
    node's, and for a gossipsub-interop node the binary's under its shim."""

    async def _start_all(self) -> None:
        await super()._start_all()
        self.status = {}
        for node, pid in self.backend.pids.items():
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            status = Path(f"/proc/{children[0] if children else pid}/status").read_text()
            self.status[node] = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)


def test_a_node_runs_unprivileged_and_reaches_nothing_of_the_orchestrators(binary, tmp_path):  # noqa: F811 (the fixture)
    """A registered program run as a node (n0 of four) is the run's own unprivileged user without
    capabilities: it cannot read the run's state file, the manifest or the other nodes' output, open a
    raw socket or change its link; the run goes on (delivery among the others), and peerlab's own
    nodes run the same way."""
    results = Path(f"/tmp/peerlab-prober-{os.getpid()}.txt")
    fd = os.open(results, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.fchmod(fd, 0o666)  # the node user writes it
    os.close(fd)
    text = SCENARIO.replace("nodes: {count: 20}", "nodes: {count: 4, groups: [{name: prober, count: 1, "
                                                  "implementation: 'interop:prober'}]}")
    text = text.replace("faults: [{at: 2.5s, action: kill, nodes: [n5], restart_after: 1s}]\n", "")
    text = text.replace("duration: 12s", "duration: 4s")  # what is asserted is the prober's, done at its start
    shared = reachable_copy(binary)  # the prober's own exec of the test node, as the node user
    prober = tmp_path / "prober"  # (itself in a folder of root's alone: the shim opens it for the node)
    prober.write_text("#!/bin/sh\n")  # registered now, written once the run has its id
    prober.chmod(0o755)
    register("prober", prober, Path(os.environ[USER_ADAPTERS_ENV]))
    scenario = parse_scenario(text + f"output: {{store: 'file://{tmp_path}'}}\n")
    runner = Privileges(scenario, make_plan(scenario))
    from orchestrator.record import host_state

    prober.write_text(PROBER.replace("BINARY", str(shared / "node")).replace("RESULTS", str(results))
                      .replace("STATE", str(host_state.STATE_DIR / f"{runner.short}.json"))
                      .replace("MANIFEST", str(runner.run_dir / "manifest.json")))
    try:
        run_dir = runner.run()
        said = results.read_text()
    finally:
        results.unlink(missing_ok=True)
        shutil.rmtree(shared)
    manifest, _ = completed(run_dir)
    uid = privileges.run_user(runner.short)[0]
    assert f"uid {uid}" in said and "CapEff:\t0000000000000000" in said and "NoNewPrivs:\t1" in said, said
    for what in ("state file", "manifest", "outputs", "output of n1", "raw socket", "own link"):
        assert f"{what}: denied" in said, said
    for node, status in runner.status.items():  # every node's program: the run's user, no capability
        assert status["Uid"].split()[:2] == [str(uid)] * 2 and int(status["CapEff"], 16) == 0, (node, status)
        assert status["NoNewPrivs"].strip() == "1", (node, status)
    assert manifest["node_exits"] == []


def test_peerlabs_own_nodes_run_unprivileged_too(tmp_path):
    from tests.support.scenarios import SMALL

    scenario = parse_scenario(SMALL + f"output: {{store: 'file://{tmp_path}'}}\n")
    runner = Privileges(scenario, make_plan(scenario))
    runner.run()
    uid = privileges.run_user(runner.short)[0]
    assert runner.status and all(s["Uid"].split()[:2] == [str(uid)] * 2 and int(s["CapEff"], 16) == 0
                                 for s in runner.status.values()), runner.status
