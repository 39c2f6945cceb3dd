"""What the adapter tests of several backends share: a small network of js-libp2p and py-libp2p nodes
(n0-n2 js, n3-n5 py, 20 ms links, n4 killed at 2.5 s and restarted 1 s later) and the check that
both adapters are installed."""
import pytest

from node.adapters import get_adapter

ADAPTERS = ["js-libp2p", "py-libp2p"]
MIXED_SMALL = """
name: adapters-small
seed: 5
nodes:
  count: 6
  groups:
    - {name: js, count: 3, implementation: js-libp2p}
    - {name: py, count: 3, implementation: py-libp2p}
protocol: {name: gossipsub, params: {heartbeat_interval: 0.5}}
topology: {algorithm: random, degree: 3}
network: {latency: {model: constant, one_way: 20ms}}
topics: {count: 1}
workload: {publishers: 4, rate: 4/s, warmup: 2s, duration: 6s, drain: 3s, message_size: 1KiB}
faults: [{at: 2.5s, action: kill, nodes: [n4], restart_after: 1s}]
calibration: {pairs: 3, throughput_nodes: 2}
"""


def require_adapters(*names: str) -> None:
    """Fail (not skip) when an adapter is missing: make setup installs them."""
    for name in names or ADAPTERS:
        missing = get_adapter(name).missing()
        if missing:
            pytest.fail(f"the {name} adapter is not installed ({missing[0]}): make adapters")
