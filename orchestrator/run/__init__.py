"""Executing a RunPlan on a real backend: the runner (the same steps for every backend), the run record
in the store, calibration, clock offsets, the client of the nodes' control API, and clean-up."""
