"""When a node counts as up for `delivery_ratio_up` (analysis/faults.py): from its t0, or from its
first connection after a (re)start where that came later, until it stopped or was killed."""
from analysis.faults import up_intervals

S = 1_000_000_000


def test_a_node_connected_before_t0_is_up_from_t0():
    marks = [("n0", "start", 0), ("n0", "connect", 1 * S), ("n0", "t0", 5 * S), ("n0", "stop", 30 * S)]
    assert up_intervals(marks, {"n0": 30 * S}, {}) == {"n0": [(5 * S, 30 * S)]}


def test_a_restart_armed_before_its_first_connection_is_up_from_that_connection():
    """An adapter's node restarted at 8.21 s arms its schedule at once (T0 is in its config) and
    connects at 8.41 s: a message it publishes at 8.26 s reaches no one, and is not the protocol's."""
    marks = [("n4", "start", 0), ("n4", "connect", 1 * S), ("n4", "t0", 2 * S),
             ("n4", "start", 8_210_000_000), ("n4", "t0", 8_210_000_000), ("n4", "connect", 8_410_000_000),
             ("n4", "connect", 8_430_000_000), ("n4", "stop", 30 * S)]
    manifest = {"faults_executed": [{"action": "kill", "node": "n4", "t_ns": 6 * S}]}
    assert up_intervals(marks, {"n4": 30 * S}, manifest) == {"n4": [(2 * S, 6 * S), (8_410_000_000, 30 * S)]}


def test_a_restart_that_connected_before_its_t0_is_up_from_its_t0():
    """peerlab's own node: restarted, dials its neighbours, then hears /start (its t0)."""
    marks = [("n1", "start", 0), ("n1", "connect", 1 * S), ("n1", "t0", 2 * S),
             ("n1", "start", 9 * S), ("n1", "connect", 9_300_000_000), ("n1", "t0", 9_500_000_000)]
    manifest = {"faults_executed": [{"action": "kill", "node": "n1", "t_ns": 7 * S}]}
    assert up_intervals(marks, {"n1": 20 * S}, manifest) == {"n1": [(2 * S, 7 * S), (9_500_000_000, 20 * S)]}


def test_a_life_without_any_connection_is_never_up_but_a_log_without_connections_is_from_t0():
    isolated = [("n2", "start", 0), ("n2", "connect", 1 * S), ("n2", "t0", 2 * S),
                ("n2", "start", 9 * S), ("n2", "t0", 9 * S), ("n2", "stop", 12 * S)]
    manifest = {"faults_executed": [{"action": "kill", "node": "n2", "t_ns": 7 * S}]}
    assert up_intervals(isolated, {"n2": 12 * S}, manifest) == {"n2": [(2 * S, 7 * S)]}
    old_log = [("n3", "t0", 2 * S), ("n3", "stop", 12 * S)]  # no connect events logged at all
    assert up_intervals(old_log, {"n3": 12 * S}, {}) == {"n3": [(2 * S, 12 * S)]}
