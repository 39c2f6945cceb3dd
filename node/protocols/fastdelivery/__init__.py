"""FastDelivery (the SmartPubSub paper): its core and its attribute boards, and its wire schema.

May import: node.protocols.base, node.protocols.dht and node.protocols.content; nothing of
orchestrator or analysis.
"""
