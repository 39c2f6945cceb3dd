"""PulsarCast: its core, its dissemination trees over the DHT, and its wire schema.

May import: node.protocols.base and node.protocols.dht; nothing of orchestrator or analysis.
"""
