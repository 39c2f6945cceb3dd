"""A backend's steps over every node (`Backend.each`): in turn where each call is local work, side by
side where each is a round trip to a container engine (docker, a pod's supervisor), results in order,
a failure raised only once every call made has ended (teardown must see what they created), and a
signal stopping the step between two nodes."""
from __future__ import annotations

import threading
import time

import pytest

from orchestrator.backends.base import Backend, StopRequested, side_by_side


class Steps(Backend):
    """Only what `each` and `start_nodes` use: the rest of a backend is not needed here."""
    name = "steps"

    def __init__(self, round_trips: bool, start=lambda node_id: None):
        self.stopping = threading.Event()
        self.round_trips = round_trips
        self._start = start

    def start_node(self, node_id, config):
        self._start(node_id)


Steps.__abstractmethods__ = frozenset()


def test_side_by_side_runs_the_calls_at_once_and_keeps_their_order():
    meet = threading.Barrier(4, timeout=5)  # broken (an error) unless all four calls wait at once

    def call(i: int) -> int:
        meet.wait()
        return i * i
    assert side_by_side(call, range(4)) == [0, 1, 4, 9]


def test_a_failure_is_raised_after_every_call_has_ended():
    ended = []

    def call(i: int) -> None:
        if i == 0:
            raise ValueError("sandbox n0 did not start")
        time.sleep(0.2)
        ended.append(i)
    with pytest.raises(ValueError, match="n0"):
        side_by_side(call, range(5))
    assert sorted(ended) == [1, 2, 3, 4]


def test_nodes_start_side_by_side_where_each_start_is_a_round_trip():
    meet = threading.Barrier(3, timeout=5)
    Steps(round_trips=True, start=lambda node_id: meet.wait()).start_nodes({f"n{i}": None for i in range(3)})
    alone = threading.Barrier(2, timeout=0.5)
    with pytest.raises(threading.BrokenBarrierError):  # in turn, the first start waits alone
        Steps(round_trips=False, start=lambda node_id: alone.wait()).start_nodes({"n0": None, "n1": None})


def test_a_signal_stops_the_starts_between_two_nodes():
    started = []
    backend = Steps(round_trips=False)

    def start(node_id: str) -> None:
        started.append(node_id)
        if node_id == "n1":
            backend.stopping.set()  # SIGTERM arrives while n1 starts
    backend._start = start
    with pytest.raises(StopRequested):
        backend.start_nodes({f"n{i}": None for i in range(4)})
    assert started == ["n0", "n1"]
