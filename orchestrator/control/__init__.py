"""Talking to a run's nodes: peerlab's control API (node_client.py) and, for an adapter's node that
has none, the same calls answered from its event log and the backend (contract_client.py).

May import: aiohttp and the standard library, nothing else of peerlab; never orchestrator.backends (the
backends hand out these clients: contract_client.py declares what it needs of a backend instead)."""
