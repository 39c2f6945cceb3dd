"""What peerlab builds on this machine, each once per pin into the cache outside the checkout: Go
programs from pinned modules (gobuild.py: the S3 server, the local cluster's programs, the go-libp2p
adapter), Rust programs from a locked crate (cargobuild.py: the rust-libp2p adapter), the adapters'
programs installed under .tools/ (adapter_programs.py), the node images (node_image.py), the
orchestrator's image (orchestrator_image.py) and the image of a report's Spark executors on
Kubernetes (spark_image.py, with its entry point spark_executor_entry.py).

May import: node/ (paths, the adapters), orchestrator/helm.py, and for the Spark image analysis.s3a
and pyspark (the jars it holds); never orchestrator.backends, which imports builds (its images)."""
