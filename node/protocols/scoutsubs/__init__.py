"""ScoutSubs (the SmartPubSub paper): its core, its filter tables, and its wire schema.

May import: node.protocols.dht and node.protocols.content; nothing of orchestrator or analysis.
"""
