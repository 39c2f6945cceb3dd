"""What a run is, before anything runs: the scenario model (YAML, units, defaults, `--set`), the
latency and churn models, matrix expansion, and the planner that turns scenario + seed into a RunPlan.

May import: node/ (the protocols, adapters, behaviours, ids and predicates a scenario names), numpy,
pydantic and yaml; nothing else of orchestrator/ (the ground floor: the rooms above import it)."""
