"""The Spark session: `local[*]` by default, quiet, sized for one machine and for the run it reads."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from analysis import jvm_archive

# Below this much compressed event log, a report is a few seconds of many small queries, bound by the
# CPU of a cold JVM: the JIT's optimising tier (C2) costs more to warm up than it saves, and the quick
# tier (C1) alone, on one compiler thread, is faster; the serial collector spends less CPU on the small
# heap than G1's parallel threads (about 10% of a report's CPU); and Spark's generated code (Janino
# compiling a class per query stage and expression) costs more than interpreting a few thousand rows
# (about 0.5 s of a quickstart report; the metrics are the same either way).
SMALL_INPUT_BYTES = 64 * 2**20
SMALL_INPUT_JVM = ["-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:+UseSerialGC"]
SMALL_INPUT_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
# Event-log bytes (compressed) per shuffle partition, and the bounds: a small run is one or two tasks
# per stage instead of eight mostly empty ones.
BYTES_PER_PARTITION = 4 * 2**20


class SparkUnavailable(RuntimeError):
    pass


def get_spark(master: str = "local[*]", app: str = "peerlab-analysis", conf: dict[str, str] | None = None,
              input_bytes: int | None = None, java_options: str | None = None) -> SparkSession:
    """A session on `master`; `conf` entries override the defaults below (a cluster wants its own
    memory settings; s3a needs its jars and credentials, see docs/analysis.md). `input_bytes`, the
    size of what it will read, picks the JIT tier and the collector; `java_options` replaces the class-archive options
    (analysis/jvm_archive.py) when given."""
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        raise SparkUnavailable("PySpark needs a Java runtime (17 or newer): install one, e.g. "
                               "`apt-get install openjdk-17-jre-headless`, or run with --no-report")
    conf = dict(conf or {})
    scratch = None
    if master.startswith("local"):
        # bind to loopback (the machine's other addresses may belong to run namespaces); a cluster's
        # executors must reach the driver, so there Spark picks the address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if "spark.local.dir" not in conf:  # a cluster's executors keep their own
            scratch = conf["spark.local.dir"] = _scratch()
    log4j = Path(__file__).with_name("log4j2.properties")
    jvm = [f"-Dlog4j2.configurationFile=file:{log4j}",
           jvm_archive.use_options(conf) if java_options is None else java_options]
    if scratch:  # the JVM's own temporary files too (native libraries, session artifacts)
        jvm.append(f"-Djava.io.tmpdir={scratch}")
    if input_bytes is not None and input_bytes < SMALL_INPUT_BYTES:
        jvm += SMALL_INPUT_JVM
        conf = {**SMALL_INPUT_CONF, **conf}
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", os.environ.get("PEERLAB_SPARK_PARTITIONS", "8"))
               .config("spark.driver.memory", os.environ.get("PEERLAB_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.sql.session.timeZone", "UTC")
               # a report rewrites its tables whole: tasks commit in place (no second rename pass at
               # job commit) and no _SUCCESS file; 50 of the 150 ms of each of a report's table writes
               .config("spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version", "2")
               .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
               .config("spark.driver.extraJavaOptions", " ".join(o for o in jvm if o)))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_session(master: str = "local[*]", conf: dict[str, str] | None = None,
                  input_bytes: int | None = None) -> Future[SparkSession]:
    """`get_spark` on a thread of its own: the JVM boots (1.5-3.5 s, spent mostly waiting on it)
    while the caller goes on: importing the analysis, converting the logs. The thread does not hold
    up the interpreter's exit (an interrupted report ends at once). Started off the main thread,
    PySpark leaves the process's SIGINT handler alone."""
    future: Future[SparkSession] = Future()

    def run() -> None:
        try:
            future.set_result(get_spark(master, conf=conf, input_bytes=input_bytes))
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the session
            future.set_exception(e)
    threading.Thread(target=run, name="spark-session", daemon=True).start()
    return future


def size_for(spark: SparkSession, input_bytes: int) -> int:
    """Size the session for a run of `input_bytes` of compressed logs; returns the shuffle partitions:
    one per BYTES_PER_PARTITION, at least 1, at most twice the cores (PEERLAB_SPARK_PARTITIONS, when
    set, wins). A small run also goes without adaptive execution, whose re-planning after every
    shuffle costs more than it saves on a few thousand rows (1-2 s of a quickstart report)."""
    spark.conf.set("spark.sql.adaptive.enabled", str(input_bytes >= SMALL_INPUT_BYTES).lower())
    if os.environ.get("PEERLAB_SPARK_PARTITIONS"):
        return int(os.environ["PEERLAB_SPARK_PARTITIONS"])
    n = partitions_for(input_bytes, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n


_ARROW = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}


def local_frame(spark: SparkSession, rows: list[tuple], columns: str) -> DataFrame:
    """A frame of rows held here, `columns` as "name type, ..." (string, long, double, boolean).

    Through Arrow: `createDataFrame` of a Python list starts Python worker processes to read it,
    which cost about a second of a report's wall time the first time."""
    names = [c.split()[0] for c in columns.split(",")]
    schema = pa.schema([(n, _ARROW[c.split()[1]]) for n, c in zip(names, columns.split(","))])
    return spark.createDataFrame(pa.Table.from_pylist([dict(zip(names, r)) for r in rows], schema))


def partitions_for(input_bytes: int, cores: int) -> int:
    """One per BYTES_PER_PARTITION of compressed logs, at least 1, at most twice the cores."""
    return max(1, min(2 * cores, -(-input_bytes // BYTES_PER_PARTITION)))


def _scratch() -> str:
    """A local session's own scratch directory (Spark's blockmgr-*, spark-* and artifacts-*
    directories and the native libraries it unpacks go in it), removed when this process exits: a
    JVM killed by `kill_jvm` cannot remove them itself, and /tmp would keep them."""
    path = tempfile.mkdtemp(prefix="peerlab-spark-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def kill_jvm() -> None:
    """An interrupted analysis: the session's JVM ends now (stopping it politely would let its
    running tasks print their failures first); its scratch directory goes when this process exits."""
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def close_gateway() -> None:
    """Close this process's connection to the session's JVM without stopping it (it exits when this
    process does, on its standard input's end)."""
    if SparkContext._gateway is not None:
        SparkContext._gateway.shutdown()


def stop_and_wait(spark: SparkSession, timeout: float = 120.0) -> None:
    """Stop the session and wait for its JVM to exit (it writes a class archive as it exits)."""
    spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        gateway.shutdown()
    if proc is not None:
        proc.stdin.close()  # the gateway JVM exits when its stdin closes
        proc.wait(timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None


def driver_peak_memory(spark: SparkSession) -> dict[str, float]:
    """The driver's peak resident memory so far, in MiB: its JVM's (VmHWM of the JVM PySpark
    launched; absent when the session came from elsewhere) and this Python process's (ru_maxrss),
    with the JVM's heap ceiling (spark.driver.memory): what bounds a report of a run larger than
    this machine's memory is whether these stay put while the executors do the work."""
    import resource

    peak = {"python_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    proc = getattr(spark.sparkContext._gateway, "proc", None)  # noqa: SLF001 - PySpark's launched JVM
    try:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if proc is not None else ():
            if line.startswith("VmHWM:"):
                peak["jvm_peak_rss_mib"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    peak["jvm_heap_max_mib"] = round(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**20, 1)  # noqa: SLF001
    return peak
