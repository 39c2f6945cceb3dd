"""The in-memory driver: a discrete-event network in virtual time that drives the same protocol
cores (the simulator's engine and the cores' deterministic tests): the network and its clock, each
node's record and ProtocolIO, the access link (the uplink's flights, the download queue and its
losses) with TCP's congestion window.

May import: node.protocols (base.py, the cores' contract), node.behaviours, node.identity,
node.eventlog and node.linkmodel; nothing of node.process (the other driver), nor of orchestrator or
analysis.
"""
