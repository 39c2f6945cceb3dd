"""GossipSub v1.1/v1.2 with the seed's large-message extensions: its state, its core, the parts of
the router (mesh membership, received control, the heartbeat, staggering and fragmentation),
peer scoring, its parameters, and the fragment wire schema.

May import: node.protocols.base and node.protocols.pubsub; nothing of orchestrator or analysis.
"""
