"""The peerlab protocol node: an asyncio runtime that drives one sans-IO protocol core.

Run it as `python -m node --config FILE` (or with PEERLAB_NODE_CONFIG set).
"""
