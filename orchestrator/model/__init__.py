"""What a run is, before anything runs: the scenario model (YAML, units, defaults, `--set`), the
latency and churn models, matrix expansion, and the planner that turns scenario + seed into a RunPlan."""
