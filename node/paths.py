"""Where peerlab's files are on a machine: the checkout's own (ROOT: scenarios, the chart, playbooks,
the node's sources, .tools) and the user's cache outside it (`cache_root`: builds, staged runs, the VM
image, Spark's jars and class archive).

It lives in node/, the bottom room, because every room needs it: node/ (the adapters' programs under
.tools), analysis/ (its jars and class archive in the cache) and orchestrator/ (everything else) import
it from here. May import: the standard library only (nothing of peerlab)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """The user's cache, outside the checkout: $PEERLAB_CACHE, or ~/.cache/peerlab."""
    return Path(os.environ.get("PEERLAB_CACHE") or Path.home() / ".cache" / "peerlab")
