"""The exit watch's rule (orchestrator/run/node_exits.py): which ends of a node count as its own. A
node that ends before the drain's planned end, or with an error at any time, is recorded; one that
ends cleanly once that end has passed (a gossipsub-interop binary's script ends there, and a loaded
orchestrator may stop the nodes a little later) ended with the run."""
import asyncio

import pytest

from orchestrator.run.node_exits import NodeExits

T0 = 1_000_000_000_000


class Ended:
    """A backend whose nodes have all exited, each with its code (as the engines report it)."""
    exit_watch_s = None

    def __init__(self, codes: dict[str, int]):
        self.codes = codes

    def alive(self, node: str) -> bool:
        return False

    def wait_node(self, node: str, timeout: float) -> int:
        return self.codes[node]

    def output_tail(self, node: str, lines: int) -> str:
        return f"{node} said goodbye\n"

    def each(self, fn, items):
        return [fn(i) for i in items]


async def blocking(fn, *args):
    return fn(*args)


@pytest.mark.parametrize(("seen_at_s", "code", "counted"), [
    (12.0, 0, True),    # before the drain's end: its own end, whatever its code
    (17.5, 0, False),   # after it, cleanly: it ended with the run
    (17.5, 1, True),    # after it, with an error: still a crash
    (17.0, 0, False),   # at it
])
def test_which_exits_count_as_the_nodes_own(tmp_path, seen_at_s, code, counted):
    manifest: dict = {}
    warned: list[str] = []
    exits = NodeExits(Ended({"n0": code}), tmp_path, manifest, warned.append,
                      lambda: T0 + int(seen_at_s * 1e9), blocking)
    exits.start(["n0"], lambda: T0, 17.0)
    asyncio.run(exits.stop())  # the last look, at that instant
    assert bool(manifest["node_exits"]) == counted and bool(warned) == counted
    if counted:
        assert manifest["node_exits"][0]["code"] == code and manifest["node_exits"][0]["offset_s"] == seen_at_s
