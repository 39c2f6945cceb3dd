"""The helm program: where it is (.tools/bin/helm, which .ci/tools installs, else the one on PATH) and
`helm`, the one way peerlab runs it. The kubernetes backend installs its releases with it, the local
cluster the shaping daemon's and the store's, and the orchestrator's image carries a copy.

May import: node.paths; nothing else of peerlab, so that every room of orchestrator/ may import it
(backends/, builds/, cluster/).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from node.paths import ROOT


def helm_binary() -> str:
    local = ROOT / ".tools" / "bin" / "helm"
    if local.exists():
        return str(local)
    found = shutil.which("helm")
    if not found:
        raise RuntimeError("helm is missing: run .ci/tools (make setup does) or install helm v3.8+")
    return found


def helm(*args: str, namespace: str, context: str | None = None, kubeconfig: Path | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    """helm with these arguments in `namespace`, against the cluster of `kubeconfig` (else $KUBECONFIG)
    and `context` (else its current one): the one way peerlab runs helm."""
    cmd = [helm_binary(), *args, "--namespace", namespace]
    cmd += ["--kube-context", context] if context else []
    cmd += ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

