"""The entry point of peerlab's Spark image (orchestrator/builds/spark_image.py), where Spark on
Kubernetes runs a report's executors. Spark starts each executor pod with the one argument `executor`
and says the rest in its environment: the driver's address (SPARK_DRIVER_URL), the executor's id,
cores and memory, the application's id, the pod's IP and name, the resource profile, the Java options
(SPARK_JAVA_OPT_0, _1, ...) and an extra class path (SPARK_CLASSPATH). This turns them into the
executor backend's command line and becomes it. It runs alone in the image: the standard library only.
"""
from __future__ import annotations

import os
import sys

JARS = "/opt/spark/jars/*"  # Spark's own jars (the driver's PySpark version) and the s3a jars
BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
REQUIRED = ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_CORES", "SPARK_APPLICATION_ID",
            "SPARK_EXECUTOR_POD_IP")


def command(env: dict[str, str]) -> list[str]:
    """The executor's java command line for the environment Spark gave its pod."""
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        raise KeyError(f"not set: {', '.join(missing)} (Spark on Kubernetes sets them in an executor's pod)")
    options = [env[k] for k in sorted((k for k in env if k.startswith("SPARK_JAVA_OPT_")),
                                      key=lambda k: int(k.rsplit("_", 1)[1]))]
    memory = env.get("SPARK_EXECUTOR_MEMORY")
    heap = [f"-Xms{memory}", f"-Xmx{memory}"] if memory else []
    classpath = ":".join(p for p in (env.get("SPARK_CLASSPATH", ""), JARS) if p)
    return ["java", *options, *heap, "-cp", classpath, BACKEND,
            "--driver-url", env["SPARK_DRIVER_URL"], "--executor-id", env["SPARK_EXECUTOR_ID"],
            "--cores", env["SPARK_EXECUTOR_CORES"], "--app-id", env["SPARK_APPLICATION_ID"],
            "--hostname", env["SPARK_EXECUTOR_POD_IP"],
            "--resourceProfileId", env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
            *(["--podName", env["SPARK_EXECUTOR_POD_NAME"]] if env.get("SPARK_EXECUTOR_POD_NAME") else [])]


def main(argv: list[str]) -> int:
    if argv[:1] != ["executor"]:
        print("peerlab's Spark image runs Spark executors on Kubernetes: its pods are made by a driver "
              "(`peerlab report s3://... --master k8s`), which starts them with the argument `executor`",
              file=sys.stderr)
        return 2
    try:
        argv = command(dict(os.environ))
    except KeyError as e:
        print(f"spark executor: {e.args[0]}", file=sys.stderr)
        return 2
    os.execvp(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
