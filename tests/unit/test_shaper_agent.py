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
