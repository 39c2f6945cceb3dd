"""A RunPlan executed in virtual time: the simulation engine (the protocol cores on
node/simulated/virtual_network.py), the `sim` backend that writes a run like the emulated ones, and message
outcomes for parameter sweeps."""
