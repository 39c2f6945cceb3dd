"""peerlab's analysis: event logs -> typed Spark DataFrames -> Parquet tables, metrics.json, report.html."""
