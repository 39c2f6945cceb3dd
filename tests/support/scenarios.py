"""Scenarios and scenario parts more than one test runs, and the header every test scenario starts with."""

_SMALL_RUN = """
name: small
seed: 5
nodes: {count: 8}
network: {latency: {model: constant, one_way: 20ms}}
topics: {count: 2, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 3, rate: 5/s, warmup: 1s, duration: 6s, drain: 2s, message_size: 2KiB}
faults: [{at: 2s, action: kill, nodes: [n7], restart_after: 2s}]
"""
SMALL = _SMALL_RUN + "calibration: {pairs: 6, throughput_nodes: 2}\n"
# the same run for tests whose assertions read no calibration
SMALL_UNCALIBRATED = _SMALL_RUN + "calibration: {enabled: false}\n"

# Six floodsub nodes, every pair connected at 10 ms one way, one topic that every node joins: every
# message reaches the five others in one hop, so a test can expect exactly who receives what.
FLOODSUB_SIX = """\
nodes: {count: 6}
protocol: floodsub
topology: {algorithm: complete}
network: {latency: {model: constant, one_way: 10ms}}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
"""

# Ten GossipSub nodes, two of them slower, on a unit square (latencies of several buckets), with jitter.
GOSSIPSUB_TEN_SQUARE = """\
nodes:
  count: 10
  groups: [{name: slow, count: 2, bandwidth_up: 8mbit, bandwidth_down: 4mbit}]
protocol: {name: gossipsub, params: {heartbeat_interval: 0.7}}
network: {latency: {model: unit-square, scale: 60ms, base: 5ms}, jitter: 3ms, bandwidth_up: 40mbit, bandwidth_down: 30mbit}
topics: {count: 2, subscriptions: {model: interest, rate: 0.8}}
workload: {publishers: 3, rate: 5/s, warmup: 2s, duration: 6s, drain: 3s, message_size: 1KiB}
"""

# Sixteen GossipSub nodes (default parameters and topology) at 20 ms one way.
GOSSIPSUB_SIXTEEN = """\
nodes: {count: 16}
protocol: gossipsub
network: {latency: {model: constant, one_way: 20ms}}
"""


def scenario_text(name: str, seed: int, *sections: str) -> str:
    """A scenario's YAML: its name and seed, then the given sections (YAML text each, in order); a
    top-level key a later section gives again replaces the earlier one (a scenario that gives a key
    twice is refused: orchestrator/model/bounded.py)."""
    blocks = {"name": f"name: {name}\n", "seed": f"seed: {seed}\n"}
    for section in sections:
        for key, block in _top_level_blocks(section if section.endswith("\n") else section + "\n"):
            blocks.pop(key, None)
            blocks[key] = block
    return "".join(blocks.values())


def _top_level_blocks(text: str) -> list[tuple[str, str]]:
    """(key, its lines) of each top-level key of a YAML mapping's text; the lines after a key that are
    indented, blank or comments belong to it."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        if line[:1] not in (" ", "\t", "#", "\n", "") and ":" in line:
            out.append((line.split(":", 1)[0].strip().strip("'\""), line))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + line)
        else:
            out.append(("", line))
    return out
