"""The commands around runs, beside the CLI: benchmarks, `doctor`, `prepare` (Ansible playbooks), the
Spark class archive and the generated references (chart schema, scenario docs)."""
