"""The shaper agent's loop (orchestrator/shaping/agent.py), fed lines in this process's own network
namespace: one answer per request, in order, and a failed request never ends it."""
import io
import json

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
