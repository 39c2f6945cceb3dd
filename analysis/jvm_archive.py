"""The driver JVM's class-data-sharing archive: where it lives, whether it fits this machine's Java
and Spark, and how it is made.

A Spark driver loads some 15,000 classes before its first query; parsing and verifying them is most
of a session's start-up (about 5.5 s to a first session and 3.5 s to its first query on 2 cores).
HotSpot can map classes it loaded once from an archive instead (JDK 13+, `-XX:SharedArchiveFile`):
that halves both. The archive is only valid for the same Java build and class path, so it is kept
per machine, under the cache directory, named by a key of the two; a session whose key has no
archive simply starts without one. `peerlab warm-up` (analysis/warm_up.py runs a small report)
makes it; `make setup` runs that.

May import: pyspark, node.paths (the cache); nothing of orchestrator/.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyspark

from node.paths import cache_root

# the archive's own diagnostics (classes it cannot hold, e.g. from signed jars) are not the user's
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> Path:
    return cache_root() / "jvm-archive"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(p) if (p := shutil.which("java")) else None)
    return found.resolve() if found and found.exists() else None


def key() -> str | None:
    """Java build (its binary's path, size and time) and the jars Spark puts on the class path."""
    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [str(java), str(java.stat().st_size), str(java.stat().st_mtime_ns), pyspark.__version__,
             *sorted(p.name for p in jars.glob("*.jar"))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path | None:
    k = key()
    return cache_dir() / f"spark-{k}.jsa" if k else None


def use_options(conf: dict[str, str]) -> str:
    """The JVM options that map the archive, or "" when there is none or the class path is the
    user's own (extra jars or packages: the archive would not match and HotSpot would say so)."""
    path = archive_path()
    if path is None or not path.exists() or _own_class_path(conf):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def dump_options(target: Path) -> str:
    """The JVM options that write the classes the session loaded to `target` when the JVM exits."""
    return f"-XX:ArchiveClassesAtExit={target} {QUIET}"


def _own_class_path(conf: dict[str, str]) -> bool:
    return any(k.startswith(("spark.jars", "spark.driver.extraClassPath")) for k in conf)
