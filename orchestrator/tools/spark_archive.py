"""Make the Spark driver's class archive (analysis/jvm_archive.py) for this machine: simulate the
quickstart, analyse it in a session that writes every class it loaded as its JVM exits, and keep the
archive under the cache. `make setup` runs it; `python -m orchestrator.tools.spark_archive --force`
remakes it. Without it reports are correct, only slower to start (about 4 s on 2 cores)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis import jvm_archive
from node.paths import ROOT


def build(force: bool = False, log=print) -> Path | None:
    target = jvm_archive.archive_path()
    if target is None:
        log("peerlab: no Java runtime: no Spark class archive made")
        return None
    if target.exists() and not force:
        return target
    from analysis.job import analyse
    from analysis.spark import get_spark, stop_and_wait

    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="peerlab-archive-") as tmp:
        run = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
             "--backend", "sim", "--no-report", "--set", f"output.store=file://{tmp}"],
            capture_output=True, text=True, check=True)
        partial = target.with_suffix(f".{os.getpid()}.partial")
        spark = get_spark("local[*]", input_bytes=0, java_options=jvm_archive.dump_options(partial))
        analyse(Path(run.stdout.strip().splitlines()[-1]), spark)
        stop_and_wait(spark)
    if not partial.exists():
        log("peerlab: the JVM wrote no class archive (does this Java support -XX:ArchiveClassesAtExit?)")
        return None
    os.replace(partial, target)  # atomic: a session starting meanwhile sees none or all of it
    for old in target.parent.glob("spark-*.jsa"):
        if old != target:
            old.unlink()  # another Java or Spark's: never valid again
    log(f"peerlab: Spark class archive {target} ({target.stat().st_size / 2**20:.0f} MiB, "
        f"{time.monotonic() - started:.0f} s)")
    return target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--force", action="store_true", help="remake it even if this machine has one")
    args = p.parse_args()
    return 0 if build(args.force) else 1


if __name__ == "__main__":
    sys.exit(main())
