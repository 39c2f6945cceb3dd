"""The image of a report's Spark executors on Kubernetes (`peerlab report s3://... --master k8s`):

    peerlab-spark:<hash>   the base image (Debian and its Python), Debian's Java 17 runtime, Spark's
                           jars as this machine's PySpark has them (the executors' Spark is then the
                           driver's, to the build), the s3a jars analysis/s3a.py pins, and the entry
                           point that turns Spark's executor environment into a command line
                           (spark_executor_entry.py); a non-root user, uid 185

(/usr/share/man/man1 first: the JRE's alternatives link its manual there, and a slim base has no such
folder.) Built from a context of its own, named by the hash of the base image's name, PySpark's version, the
jars' names and sizes and the entry point: a second build builds nothing.
May import: orchestrator.builds.node_image (the base), analysis.s3a (the jars' paths), pyspark (its
jars' folder); never orchestrator.backends or orchestrator.cluster.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from orchestrator.builds import node_image

REPOSITORY = "peerlab-spark"
ENTRY = Path(__file__).with_name("spark_executor_entry.py")
UID = 185  # Spark's own images' user
DOCKERFILE = """FROM {base}
RUN mkdir -p /usr/share/man/man1 \\
 && apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \\
 && groupadd -g {uid} spark && useradd -u {uid} -g spark -M -d /opt/spark -s /usr/sbin/nologin spark
COPY jars /opt/spark/jars
COPY spark_executor_entry.py /opt/spark/entry.py
ENV SPARK_HOME=/opt/spark
WORKDIR /opt/spark
USER {uid}:{uid}
ENTRYPOINT ["python3", "/opt/spark/entry.py"]
"""


def spark_jars() -> list[Path]:
    """Spark's jars as the driver's PySpark has them."""
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def s3a_jars() -> list[Path]:
    from analysis import s3a

    return s3a.ensure_jars()


def image_tag(base: str | None = None) -> str:
    import pyspark

    digest = hashlib.sha256(f"{base or node_image.base_image()} pyspark {pyspark.__version__} uid {UID}".encode())
    digest.update(DOCKERFILE.encode())
    for jar in [*spark_jars(), *s3a_jars()]:
        digest.update(f"{jar.name} {jar.stat().st_size}".encode())
    digest.update(ENTRY.read_bytes())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def build(client, base: str | None = None, say: Callable[[str], None] = print) -> str:
    """The image in the Docker engine of `client` (built unless its tag is there); its tag."""
    base = base or node_image.base_image()
    tag = image_tag(base)
    if node_image.present(client, tag):
        return tag
    jars = [*spark_jars(), *s3a_jars()]
    size = sum(j.stat().st_size for j in jars)
    say(f"  building {tag} (Spark's executors on Kubernetes: {base} with Java 17 and {len(jars)} jars, "
        f"{size / 2**20:.0f} MiB; once per change of PySpark or the s3a pins)")
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        (context / "jars").mkdir()
        for jar in jars:  # hard links where the context shares the jars' filesystem: nothing copied
            try:
                os.link(jar, context / "jars" / jar.name)
            except OSError:
                shutil.copy2(jar, context / "jars" / jar.name)
        shutil.copy2(ENTRY, context / "spark_executor_entry.py")
        (context / "Dockerfile").write_text(DOCKERFILE.format(base=base, uid=UID))
        failed = node_image.build_context(tag, context)
    if failed:
        raise RuntimeError(f"docker build of {tag} failed: {failed}")
    return tag
