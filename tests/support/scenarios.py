"""Scenarios and scenario parts more than one test runs, and the header every test scenario starts with."""

SMALL = """
name: small
seed: 5
nodes: {count: 8}
network: {latency: {model: constant, one_way: 20ms}}
topics: {count: 2, subscriptions: {model: interest, rate: 1.0}}
workload: {publishers: 3, rate: 5/s, warmup: 1s, duration: 6s, drain: 2s, message_size: 2KiB}
faults: [{at: 2s, action: kill, nodes: [n7], restart_after: 2s}]
calibration: {pairs: 6, throughput_nodes: 2}
"""

# Six floodsub nodes, every pair connected at 10 ms one way, one topic that every node joins: every
# message reaches the five others in one hop, so a test can expect exactly who receives what.
FLOODSUB_SIX = """\
nodes: {count: 6}
protocol: floodsub
topology: {algorithm: complete}
network: {latency: {model: constant, one_way: 10ms}}
topics: {count: 1, subscriptions: {model: interest, rate: 1.0}}
"""

# Sixteen GossipSub nodes (default parameters and topology) at 20 ms one way.
GOSSIPSUB_SIXTEEN = """\
nodes: {count: 16}
protocol: gossipsub
network: {latency: {model: constant, one_way: 20ms}}
"""


def scenario_text(name: str, seed: int, *sections: str) -> str:
    """A scenario's YAML: its name and seed, then the given sections (YAML text each, in order)."""
    return f"name: {name}\nseed: {seed}\n" + "".join(s if s.endswith("\n") else s + "\n" for s in sections)
