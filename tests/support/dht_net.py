"""In-memory networks of DHT cores for the tests: nodes join one by one, each dialling up to three
earlier nodes as its bootstrap seeds, then the DHT settles."""
from __future__ import annotations

import random

from node.protocols.base import Params, ProtocolCore
from node.simulated.virtual_network import MemNetwork


def dht_network(core: type[ProtocolCore], params: Params, n: int, seed: int, settle: float = 5.0,
                stagger: float = 0.0) -> MemNetwork:
    net = MemNetwork(seed=seed, latency=0.01)
    rng = random.Random(seed)
    for i in range(n):
        net.add_node(f"n{i}", core, params)
        for j in rng.sample(range(i), min(3, i)):
            net.connect(f"n{i}", f"n{j}")
        if stagger:
            net.run(until=net.now + stagger)
    net.run(until=net.now + settle)
    return net
