"""peerlab's orchestrator: scenario model, planner, backends, shaping, faults, store and the CLI.

    model/       what a run is before anything runs: the scenario, the planner, the overlays
    shaping/     every link's bandwidth, latency and loss, on every backend
    control/     talking to a run's nodes
    store/       where runs are kept (file://, s3://)
    record/      what a run leaves on record, on this host and in the store
    fidelity/    whether a live run's timing can be trusted
    builds/      what peerlab builds on this machine (Go and Rust programs, images)
    backends/    where nodes run: network namespaces, Docker, Kubernetes
    faults/      the fault timeline executed: its rules (shared by run/ and sim/), a live run's
                 executor, a link action's next link shapes
    sim/         a RunPlan in virtual time
    run/         a RunPlan executed on a real backend
    cluster/     the local multi-node Kubernetes cluster (kind)
    vm/          the netem guest (QEMU)
    tools/       benchmarks, `doctor`, `prepare`, the generated references
    cli/         the `peerlab` command
    procfs.py    what /proc says of a process
    helm.py      the helm program
    spark_on_k8s.py  a report's Spark executors as pods

May import: this module imports nothing. Each package's docstring states what it may import; of the
modules here, procfs.py imports nothing of peerlab, helm.py node.paths, spark_on_k8s.py (inside its
functions) backends/, builds/, cluster/ and record/. Nothing in orchestrator/ imports cli/, the top floor.
"""
