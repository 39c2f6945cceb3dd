"""Where the checkout's own files are (scenarios, the chart, playbooks, the node's sources, .tools),
and the user's cache outside it (builds, staged runs, the VM image)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """The user's cache, outside the checkout: $PEERLAB_CACHE, or ~/.cache/peerlab."""
    return Path(os.environ.get("PEERLAB_CACHE") or Path.home() / ".cache" / "peerlab")
