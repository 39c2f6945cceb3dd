"""The Kademlia DHT and the base of the cores that run on it (PulsarCast, ScoutSubs, FastDelivery):
the routing table, the DHT's rules, connections on demand, and the `kademlia.Envelope` wire.

May import: node.protocols.base and node.protocols.content; no other protocol, nothing of
orchestrator or analysis.
"""
