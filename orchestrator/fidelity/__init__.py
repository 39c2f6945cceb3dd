"""Whether a live run's timing can be trusted: sampled through the run (sampler.py: host CPU in
host.py, node loop lag, delay-line lateness, RTT probes in probes.py), summed up per phase
(figures.py), judged by one rule (rule.py) and told (text.py) in the manifest's `fidelity` section.

May import: orchestrator.model (the plan, the fault table), orchestrator.control.node_client, node.adapters
and node.process.looplag; orchestrator.backends for type hints only (netprobe.py); never run/, which
imports it."""
