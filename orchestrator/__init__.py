"""peerlab's orchestrator: scenario model, planner, backends, shaping, faults, store and the CLI."""
