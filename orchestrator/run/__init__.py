"""Executing a RunPlan on a real backend: the runner (the same steps for every backend),
readiness, calibration, clock offsets, admission, the memory watch and the live fault timeline. The
top floor of the orchestrator's machinery: backends, the simulator and the fidelity watch never
import it (what they share with it is in control/, record/, fidelity/netprobe.py and procfs.py)."""
