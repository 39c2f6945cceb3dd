"""The commands around runs: benchmarks, `doctor`, the node image, and `prepare` (Ansible playbooks)."""
