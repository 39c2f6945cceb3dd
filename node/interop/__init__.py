"""The gossipsub-interop node contract (libp2p/test-plans, folder gossipsub-interop), peerlab's second
node contract: a binary written for it runs unchanged as a peerlab node (`implementation:
interop:NAME`, registered outside the scenario; docs/interop.md).

    script.py    a node's config (the contract's, node/contract.py) -> the instruction script that
                 contract's binaries read from `--params params.json`; the message ids both sides
                 agree on; the whole experiment's script for `peerlab interop export`
    stdout.py    the binary's stdout (JSON lines: `PeerID`, `Received Message`) -> peerlab's events
    sockets.py   the node's TCP connections, read from the kernel (the contract logs none)
    shim.py      `python -m node.interop --binary BIN --config FILE`: runs the binary as one peerlab
                 node (host name node<ID>, /etc/hosts, aligned start, events, SIGTERM)
    instructions.schema.json   the contract's instructions, restated as a JSON Schema

May import: node.contract, node.eventlog, node.ids and node.process (its privileges, for the shim);
nothing of node.protocols (the binary is the protocol), nor of orchestrator or analysis.
"""
