"""What a run leaves on record: on this host, its state file, status and scratch directory, by which
`peerlab clean` finds it (host_state.py); in the store, its manifest, status and event logs
(run_record.py)."""
