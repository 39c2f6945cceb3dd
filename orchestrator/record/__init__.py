"""What a run leaves on record: on this host, its state file, status and scratch directory, by which
`peerlab clean` finds it (host_state.py; its lease, lease.py; what `clean` keeps of a crashed run's logs,
salvage.py); in the store, its manifest, status and event logs (run_record.py).

May import: orchestrator.store (the run's store, durable.py's crash-safe files), orchestrator.model
(the plan, the scenario), pyroute2 and rich, and inside a function analysis.ingest (the events table
refreshed at a run's end); never backends/, run/, sim/ or cli/, which import it."""
