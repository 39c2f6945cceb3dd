"""Topiary: its core over a static overlay, and its peer score.

May import: node.protocols.overlays (the static overlay it runs over); nothing of orchestrator
or analysis.
"""
