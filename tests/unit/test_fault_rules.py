"""The fault timeline's rules (orchestrator/faults/rules.py), the same for the live runner and the simulator:
which action a planned fault becomes, and when it is skipped."""
from orchestrator.faults import rules as fault_rules
from orchestrator.model.plan import FaultEvent


class Recorder:
    def __getattr__(self, action):
        return lambda *args: (action, args)


def decide(fault, up=(), degraded=()):
    return fault_rules.step(fault, Recorder(), lambda n: n in up, set(degraded))


def test_each_action_reaches_its_executor_method_with_its_arguments():
    assert decide(FaultEvent(at=1, action="kill", node="n1"), up={"n1"}) == ("kill", ("n1",))
    assert decide(FaultEvent(at=1, action="stop", node="n1"), up={"n1"}) == ("stop", ("n1",))
    assert decide(FaultEvent(at=1, action="restart", node="n1")) == ("start", ("n1",))
    assert decide(FaultEvent(at=1, action="join", node="n9")) == ("start", ("n9",))
    assert decide(FaultEvent(at=1, action="partition", groups=[["n0"], ["n1"]])) == ("partition", ([["n0"], ["n1"]],))
    assert decide(FaultEvent(at=1, action="heal")) == ("heal", ())
    assert decide(FaultEvent(at=1, action="degrade", node="n2", delay_ms=50, loss=0.1, bandwidth=5_000_000)) == \
        ("degrade", ("n2", 50, 0.1, 5_000_000))
    assert decide(FaultEvent(at=1, action="restore", node="n2"), degraded={"n2"}) == ("restore", ("n2",))


def test_faults_that_do_not_apply_are_skipped_with_the_reason():
    assert "not running" in decide(FaultEvent(at=3, action="kill", node="n1"))
    assert "not running" in decide(FaultEvent(at=3, action="stop", node="n1"))
    assert "still running" in decide(FaultEvent(at=3, action="restart", node="n1"), up={"n1"})
    assert "still running" in decide(FaultEvent(at=3, action="join", node="n1"), up={"n1"})
    assert "not degraded" in decide(FaultEvent(at=3, action="restore", node="n1"))
