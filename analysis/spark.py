"""The Spark session: `local[*]` by default, quiet, sized for one machine."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from pyspark.sql import SparkSession


class SparkUnavailable(RuntimeError):
    pass


def get_spark(master: str = "local[*]", app: str = "peerlab-analysis", conf: dict[str, str] | None = None) -> SparkSession:
    """A session on `master`; `conf` entries override the defaults below (a cluster wants its own
    memory settings; s3a needs its jars and credentials, see docs/analysis.md)."""
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        raise SparkUnavailable("PySpark needs a Java runtime (17 or newer): install one, e.g. "
                               "`apt-get install openjdk-17-jre-headless`, or run with --no-report")
    if master.startswith("local"):
        # bind to loopback (the machine's other addresses may belong to run namespaces); a cluster's
        # executors must reach the driver, so there Spark picks the address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).with_name("log4j2.properties")
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", os.environ.get("PEERLAB_SPARK_PARTITIONS", "8"))
               .config("spark.driver.memory", os.environ.get("PEERLAB_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
