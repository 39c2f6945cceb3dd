"""Progress of a long first build (a Go or Rust program, the S3 server, the cluster's programs): the
command runs as it would, while a line on stderr every `interval` seconds says it is still going and for
how long, and a last line says what it took. Imports nothing of peerlab's."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

INTERVAL_S = 30.0


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"


def run(cmd: list[str], what: str, interval: float = INTERVAL_S, **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, **kwargs), saying on stderr every `interval` s that `what` is still being built,
    then how long it took (or that it failed)."""
    start = time.monotonic()
    done = threading.Event()

    def tell() -> None:
        while not done.wait(interval):
            print(f"peerlab: building {what}: {_clock(time.monotonic() - start)} so far", file=sys.stderr, flush=True)

    threading.Thread(target=tell, daemon=True).start()
    try:
        result = subprocess.run(cmd, **kwargs)
    finally:
        done.set()
    outcome = "built" if result.returncode == 0 else "failed building"
    print(f"peerlab: {outcome} {what} in {_clock(time.monotonic() - start)}", file=sys.stderr, flush=True)
    return result
