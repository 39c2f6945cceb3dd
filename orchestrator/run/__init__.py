"""Executing a RunPlan on a real backend: the runner (the same steps for every backend),
readiness, calibration, clock offsets, admission, the memory watch, and the fault timeline's clock
(what a fault does is faults/'s). The top floor of the orchestrator's machinery: backends, faults/,
the simulator and the fidelity watch never import it (what they share with it is in control/,
record/, faults/rules.py, fidelity/netprobe.py and procfs.py).
May import: node/ and every room of orchestrator/ below it (model, backends, shaping, control, faults,
fidelity, record, procfs); never cli/, which imports it."""
