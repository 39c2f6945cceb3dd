"""The peerlab protocol node. This package holds what its two drivers share (the node's life, its
config, event log, identity, framing, link model); `process/` runs a node as an OS process over real
TCP (`python -m node --config FILE`, or with PEERLAB_NODE_CONFIG set), `simulated/` runs many in
virtual time, and `protocols/` holds the sans-IO cores both drive.

The bottom room: it imports nothing of orchestrator/ or analysis/, and both import it. Its paths.py
(where peerlab's files are: the checkout, the user's cache) is here for that reason: every room needs it.
"""
