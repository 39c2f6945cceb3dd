"""What the adapter tests of several backends share: a small network of nodes of every libp2p adapter
(n0-n1 go, n2-n3 js, n4-n5 py, n6-n7 rust; 20 ms links, py's n4 killed at 2.5 s and restarted 1 s
later) and the check that the adapters are installed."""
import pytest

from node.adapters import get_adapter

ADAPTERS = ["go-libp2p", "js-libp2p", "py-libp2p", "rust-libp2p"]  # sorted, as the tests compare
MIXED_SMALL = """
name: adapters-small
seed: 5
nodes:
  count: 8
  groups:
    - {name: go, count: 2, implementation: go-libp2p}
    - {name: js, count: 2, implementation: js-libp2p}
    - {name: py, count: 2, implementation: py-libp2p}
    - {name: rust, count: 2, implementation: rust-libp2p}
protocol: {name: gossipsub, params: {heartbeat_interval: 0.5}}
topology: {algorithm: random, degree: 3}
network: {latency: {model: constant, one_way: 20ms}}
topics: {count: 1}
workload: {publishers: 4, rate: 4/s, warmup: 2s, duration: 6s, drain: 3s, message_size: 1KiB}
faults: [{at: 2.5s, action: kill, nodes: [n4], restart_after: 1s}]
calibration: {pairs: 3, throughput_nodes: 0}  # round trips only: the rate is asserted on other runs
"""


def require_adapters(*names: str) -> None:
    """Fail (not skip) when an adapter is missing: make setup installs them."""
    for name in names or ADAPTERS:
        missing = get_adapter(name).missing()
        if missing:
            pytest.fail(f"the {name} adapter is not installed ({missing[0]}): make adapters")
