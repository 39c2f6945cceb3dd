"""The shaper agent's loop (orchestrator/shaping/agent.py), fed lines in this process's own network
namespace: one answer per request, in order, and a failed request never ends it."""
import io
import json
import os

from orchestrator.shaping import agent, ops


def test_every_request_gets_one_answer_in_order_and_a_failure_does_not_end_the_agent():
    requests = [{"ops": ops.to_wire([ops.Counters("lo")])},
                {"ops": [{"op": "teleport", "ifname": "lo"}]},
                {"delayline": {"op": "stats"}},
                {"what": 1},
                {"ops": ops.to_wire([ops.Counters("lo"), ops.Describe("lo")])}]
    out = io.StringIO()
    assert agent.serve(io.StringIO("".join(json.dumps(r) + "\n\n" for r in requests)), out) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(answers) == len(requests)
    (lo,) = answers[0]["done"]
    assert lo["op"] == "counters" and lo["ifname"] == "lo" and all(lo[k] >= 0 for k in ("tx_bytes", "rx_packets"))
    assert answers[1] == {"error": "ValueError: unknown shaping operation 'teleport'"}
    assert answers[2] == {"error": "RuntimeError: no delay line here: send delayline_start first"}
    assert answers[3] == {"error": "ValueError: unknown request ['what']"}
    assert [d["op"] for d in answers[4]["done"]] == ["counters", "describe"]


def test_ids_come_back_batches_name_their_failing_item_and_the_version_is_the_codes():
    """A request's id comes back in its answer (the orchestrator passes over a late answer); a batch
    applies its items in order and names the first that fails; `version` is the package's hash."""
    requests = [{"id": 7, "batch": [{"ops": ops.to_wire([ops.Counters("lo")])},
                                    {"ops": ops.to_wire([ops.Describe("lo")])}]},
                {"id": 8, "batch": [{"ops": ops.to_wire([ops.Counters("lo")])},
                                    {"ops": [{"op": "teleport", "ifname": "lo"}]},
                                    {"ops": ops.to_wire([ops.Counters("lo")])}]},
                {"id": 9, "version": True}]
    out = io.StringIO()
    assert agent.serve(io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), out) == 0
    first, second, third = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["id"] == 7 and [[d["op"] for d in done] for done in first["done"]] == [["counters"], ["describe"]]
    assert second == {"error": "ValueError: unknown shaping operation 'teleport'", "item": 1, "id": 8}
    assert third == {"version": agent.code_version(), "id": 9}


class LateLines:
    """A channel whose first answer is a late one, for an earlier request (id 0)."""
    def __init__(self):
        self.out = [json.dumps({"done": ["stale"], "id": 0})]

    def send(self, line: str) -> None:
        self.out.append(json.dumps({"done": ["fresh"], "id": json.loads(line)["id"]}))

    def receive(self, timeout: float) -> str:
        return self.out.pop(0)

    def close(self) -> None:
        pass


def test_the_orchestrators_side_passes_over_a_late_answer():
    assert agent.ShaperAgent(LateLines(), "here").request({"ops": []}) == {"done": ["fresh"]}


def test_the_agent_ends_when_no_request_comes(tmp_path):
    import os
    read, write = os.pipe()
    out = io.StringIO()
    with os.fdopen(read) as stdin:
        assert agent.serve(stdin, out, idle_s=0.2) == 0  # nothing written, the pipe still open: it ends
    os.close(write)
    assert out.getvalue() == ""


FAKE_CRICTL = r'''#!/usr/bin/env python3
"""crictl as the daemon's CRI answers it: `pods ... -o json` lists sandboxes, `inspectp ID...` prints one
object for one ID and a list for several, an unknown ID or flag is an error. Each call is logged."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CRICTL_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
SANDBOXES = {"id-a": ("peerlab", "pl1-nodes-0", {"peerlab.run": "1"}, "/var/run/netns/cni-a"),
             "id-b": ("peerlab", "pl1-nodes-1", {"peerlab.run": "1"}, "/var/run/netns/cni-b"),
             "id-x": ("peerlab", "someone-else", {"app": "x"}, "/var/run/netns/cni-x"),
             "id-o": ("other", "pl1-nodes-0", {"peerlab.run": "1"}, "/var/run/netns/cni-o")}
if args[:1] == ["pods"] and args[1:] == ["--namespace", args[2], "--state", "ready", "-o", "json"]:
    ns = args[2].strip("^$")
    print(json.dumps({"items": [{"id": i, "metadata": {"name": n, "namespace": s}, "state": "SANDBOX_READY",
                                  "labels": labels} for i, (s, n, labels, _) in SANDBOXES.items() if s == ns]}))
elif args[:1] == ["inspectp"] and args[1:] and all(i in SANDBOXES for i in args[1:]):
    out = [{"status": {"id": i, "labels": SANDBOXES[i][2]},
            "info": {"runtimeSpec": {"linux": {"namespaces": [{"type": "pid"},
                                                              {"type": "network", "path": SANDBOXES[i][3]}]}}}}
           for i in args[1:]]
    print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
else:
    print(f"crictl: unknown or unsupported arguments {args}", file=sys.stderr)
    sys.exit(1)
'''


def test_the_agent_finds_pods_namespaces_through_the_cri_in_two_calls_and_enters_no_other_pod(tmp_path, monkeypatch):
    """However many pods, two calls to the runtime (a call is a process: 60 of them were seconds of a
    busy start-up); a pod that is not a peerlab run's, or has no ready sandbox here, is refused by name."""
    crictl = tmp_path / "crictl"
    crictl.write_text(FAKE_CRICTL)
    crictl.chmod(0o755)
    log = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CRICTL_LOG", str(log))
    requests = [{"pods_netns": {"namespace": "peerlab", "pods": ["pl1-nodes-1", "pl1-nodes-0"]}},
                {"pods_netns": {"namespace": "peerlab", "pods": ["pl1-nodes-0"]}},
                {"pods_netns": {"namespace": "peerlab", "pods": ["pl1-nodes-0", "someone-else"]}},
                {"pods_netns": {"namespace": "peerlab", "pods": ["pl1-nodes-7"]}}]
    out = io.StringIO()
    assert agent.serve(io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), out) == 0
    both, one, foreign, absent = (json.loads(line) for line in out.getvalue().splitlines())
    assert both == {"netns": {"pl1-nodes-1": "/var/run/netns/cni-b", "pl1-nodes-0": "/var/run/netns/cni-a"}}
    assert one == {"netns": {"pl1-nodes-0": "/var/run/netns/cni-a"}}  # not the other namespace's pod
    assert "someone-else is not a peerlab run's" in foreign["error"] and "not entered" in foreign["error"]
    assert "pl1-nodes-7: 0 ready sandboxes on this node" in absent["error"]
    calls = log.read_text().splitlines()
    assert [c.split()[0] for c in calls[:4]] == ["pods", "inspectp", "pods", "inspectp"]
