"""The peerlab protocol node. This package holds what its two drivers share (the node's life, its
config, event log, identity, framing, link model); `process/` runs a node as an OS process over real
TCP (`python -m node --config FILE`, or with PEERLAB_NODE_CONFIG set), `memory/` runs many in virtual
time, and `protocols/` holds the sans-IO cores both drive.
"""
