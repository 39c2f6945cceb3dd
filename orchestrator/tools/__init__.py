"""The commands around runs, beside the CLI: benchmarks, `doctor`, `prepare` (Ansible playbooks), the
Spark class archive and the generated references (chart schema, scenario docs).

May import: anything of peerlab but cli/, which imports it: run/ (runner, admission), sim/, model/,
shaping/, fidelity.host, procfs, and for `doctor` cluster/, store.s3server and vm/; analysis/ (Spark)
and node/; ansible_runner, kubernetes, pyroute2 and rich. Nothing else of peerlab imports it."""
