"""Static overlays (the CD-MAX paper's and their baselines): gossip over a topology fixed by the
scenario, and the overlay wire schema Topiary shares.

May import: node.protocols.base and node.protocols.pubsub (the topic core); nothing of
orchestrator or analysis.
"""
