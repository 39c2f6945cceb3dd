"""Traffic and control attacks (node/behaviours.py) against GossipSub on the in-memory network: each
attack really happens (seen in the honest nodes' events), and honest delivery survives it."""
from __future__ import annotations

from collections import Counter

import pytest

from node.behaviours import malformed_frame
from node.framing import MAX_FRAME
from node.protocols.pubsub import wire
from orchestrator.model.plan import make_plan
from orchestrator.model.scenario import ScenarioError, parse_scenario
from orchestrator.sim.engine import Simulation
from tests.support.scenarios import GOSSIPSUB_SIXTEEN, scenario_text

BASE = scenario_text("a", 2, GOSSIPSUB_SIXTEEN,
                     "workload: {publishers: 3, rate: 4/s, warmup: 2s, duration: 8s, drain: 3s, message_size: 1KB}")


def attacked(behaviour: str, extra: str = "") -> tuple[Simulation, Counter, set[str]]:
    plan = make_plan(parse_scenario(BASE + f"attackers: [{{behaviour: {behaviour}, count: 3{extra}}}]\n"))
    sim = Simulation(plan, bandwidth=False)
    sim.run()
    honest = {n.id for n in plan.nodes if n.role == "honest"}
    seen: Counter = Counter()
    for node_id in honest:
        for e in sim.net.nodes[node_id].events:
            seen[(e["type"], e.get("reason"))] += 1
    delivered = {m for _, _, _, m in sim.sent}
    for node_id in honest:
        got = {e["msg_id"] for e in sim.net.nodes[node_id].events if e["type"] == "deliver_message"}
        missing = {m for _, _, origin, m in sim.sent if origin != node_id} - got
        assert not missing, f"{behaviour}: {node_id} missed {len(missing)} honest messages"
    assert delivered
    return sim, seen, honest


def test_graft_spam_is_penalised():
    _, seen, _ = attacked("graft-spam")
    assert seen[("penalty", "graft in backoff")] > 0


@pytest.mark.slow
def test_ihave_spam_breaks_promises_and_is_penalised():
    _, seen, _ = attacked("ihave-spam", ", ids: 50")
    assert seen[("penalty", "broken promise")] > 0


def served_to_attackers(behaviour: str, extra: str = "") -> int:
    sim, _, honest = attacked(behaviour, extra)
    attackers = {n for n in sim.net.nodes if n not in honest}
    return sum(e.get("data_bytes", 0) for n in honest for e in sim.net.nodes[n].events
               if e["type"] == "send_rpc" and e["peer"] in attackers)


def test_iwant_spam_costs_the_honest_nodes_bytes():
    """Beyond what the same three peers get as ordinary mesh members (a `censor` peer receives as
    any peer does): 917,000 bytes there, 4,651,000 under IWANT spam."""
    assert served_to_attackers("iwant-spam", ", ids: 20") > 3 * served_to_attackers("censor") > 0


def test_idontwant_liar_makes_peers_skip_it():
    sim, seen, honest = attacked("idontwant-liar")
    liars = {n for n in sim.net.nodes if n not in honest}
    lies = sum(1 for n in honest for e in sim.net.nodes[n].events
               if e["type"] == "recv_rpc" and e["peer"] in liars and e.get("idontwant"))
    dropped = sum(1 for n in liars for e in sim.net.nodes[n].events
                  if e["type"] == "drop_rpc" and e["reason"] == "attack: idontwant-liar")
    assert lies > 0 and dropped > 0  # it disowns what it hears of, and relays nothing


@pytest.mark.slow
def test_publish_flood_is_relayed_but_left_out_of_the_workload():
    sim, seen, honest = attacked("publish-flood", ", rate: 20/s, size: 512")
    flooders = {n for n in sim.net.nodes if n not in honest}
    flood = {e["msg_id"] for n in flooders for e in sim.net.nodes[n].events if e["type"] == "publish_message"}
    assert len(flood) > 100  # 3 attackers x 20/s over the run
    relayed = {e["msg_id"] for n in honest for e in sim.net.nodes[n].events if e["type"] == "deliver_message"}
    assert flood & relayed
    assert not flood & {m for _, _, _, m in sim.sent}  # sim.sent is the planned (honest) workload


def test_malformed_frames_are_refused_without_harm():
    _, seen, _ = attacked("malformed", ", rate: 50/s")
    assert seen[("drop_rpc", "malformed")] > 50


def test_malformed_frames_cover_each_kind():
    import random

    rng = random.Random(1)
    frames = [malformed_frame(rng, n) for n in range(1, 51)]
    assert len(frames[49]) == MAX_FRAME + 1  # every 50th is over the transport's limit
    refused = {0: 0, 1: 0, 2: 0}  # by kind: random bytes, a truncated RPC, lying length fields
    for n, f in enumerate(frames[:49], start=1):
        try:
            wire.decode_rpc(f)
        except wire.DecodeError:
            refused[n % 3] += 1
    assert refused == {0: 16, 1: 17, 2: 16}  # every one of each kind


def test_control_attacks_need_the_pubsub_wire():
    with pytest.raises(ScenarioError, match="attackers\\[0\\].behaviour: ihave-spam speaks the libp2p pubsub"):
        parse_scenario(BASE.replace("protocol: gossipsub", "protocol: topiary")
                       + "attackers: [{behaviour: ihave-spam, count: 2}]\n")
