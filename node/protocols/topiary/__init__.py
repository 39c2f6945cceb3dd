"""Topiary: its core over a static overlay, and its peer score."""
