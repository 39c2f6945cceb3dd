"""The node as an OS process (the asyncio driver): the runtime that drives one protocol core over
real TCP connections, its transport, its control API, the loop-lag clock, and the fork server the
local backend starts nodes from.

May import: the rest of node/ (node.__main__ for the fork server, config, dilation, eventlog,
framing, identity, ids, lifecycle, linkmodel, behaviours, protocols); never node.simulated, node.interop
or node.adapters; nothing of orchestrator or analysis.
"""
