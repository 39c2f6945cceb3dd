"""The node as an OS process (the asyncio driver): the runtime that drives one protocol core over
real TCP connections, its transport, its control API, the loop-lag clock, and the fork server the
local backend starts nodes from."""
