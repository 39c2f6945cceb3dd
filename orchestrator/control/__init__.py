"""Talking to a run's nodes: peerlab's control API (node_client.py) and, for an adapter's node that
has none, the same calls answered from its event log and the backend (contract_client.py)."""
