"""peerlab's analysis: event logs -> typed Spark DataFrames -> Parquet tables, metrics.json, report.html.

    ingest, spark, s3a, jvm_archive    the logs into the events table; the Spark session, its s3a jars
                                       and its class archive
    faults, metrics, per_node, traffic, views, relaying, kernel_traffic, fidelity
                                       the themes: pure figures from frames and rows
    run_data                           one run's frames, each made once (the data hub: reads the themes)
    registry, catalogue                how a metric or table registers; every one, in metrics.json's order
    extras/                            protocol-specific sections, registered by protocol name
    job, report, progress              the entry point (one run's job), its HTML page, its progress
    compare, duck, synthetic, engine_bench   `peerlab compare`, and the analysis benchmark's tools

The arrows go one way: job -> catalogue -> run_data -> the themes. May import: node/ (ids, the
event schema, the protocols, paths for the cache); never orchestrator/, which imports analysis
(for reports, benchmarks and the class archive)."""
