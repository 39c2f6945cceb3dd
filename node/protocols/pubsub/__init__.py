"""What the topic-based pubsub family shares (FloodSub, GossipSub): the libp2p RPC wire schema,
message ids and signatures as go-libp2p-pubsub makes them, the topic core, validators.

May import: node.protocols.base and node.identity (signatures); never gossipsub/ or floodsub.py,
which build on it; nothing of orchestrator or analysis.
"""
