"""A RunPlan executed in virtual time: the simulation engine (the protocol cores on
node/simulated/virtual_network.py), the `sim` backend that writes a run like the emulated ones, and message
outcomes for parameter sweeps.

May import: node/ (the protocol cores, the virtual network, the lifecycle, ids and predicates),
orchestrator.model, orchestrator.faults.rules and next_shapes, orchestrator.record.run_record (a run written as the
emulated ones are), orchestrator.fidelity.text and rich; never run/ or backends/."""
