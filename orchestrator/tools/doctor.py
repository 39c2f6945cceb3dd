"""`peerlab doctor`: what this machine offers and which backends and shaping modes can run here."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from node.paths import ROOT


def _cmd_version(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else cmd[0]


def checks() -> list[dict[str, Any]]:
    from orchestrator.shaping import probe_htb, probe_netem

    root = os.geteuid() == 0
    rows: list[dict[str, Any]] = [{"what": "root (or CAP_NET_ADMIN)", "ok": root,
                                   "detail": "yes" if root else "run peerlab as root for the local backend"}]
    if root:
        htb, htb_why = probe_htb()
        netem, netem_why = probe_netem()
        rows.append({"what": "network namespaces + HTB", "ok": htb, "detail": htb_why})
        from orchestrator.shaping.delayline import probe as probe_delayline

        line, line_why = probe_delayline()
        rows.append({"what": "netem", "ok": netem, "detail": netem_why + (
            "" if netem else " -> latency by the delay line (below), else in peerlab's node transport")})
        rows.append({"what": "delay line (NFQUEUE)", "ok": line, "detail": line_why + (
            " -> latency for any node implementation without netem (shaping mode 'delayline')" if line else "")})
        if not netem:
            rows.append(_guest_row())
        from orchestrator.shaping import dilated_cubic

        cubic, cubic_why = dilated_cubic.status()
        rows.append({"what": f"{dilated_cubic.NAME} (a dilated run's TCP)", "ok": cubic, "detail": cubic_why})
    java = _cmd_version(["java", "-version"])
    rows.append({"what": "java (for PySpark reports)", "ok": java is not None,
                 "detail": java or "missing: apt-get install openjdk-17-jre-headless"})
    if java is not None:
        from analysis.jvm_archive import archive_path

        archive = archive_path()
        have = bool(archive and archive.exists())
        rows.append({"what": "Spark class archive", "ok": have, "detail": str(archive) if have else
                     "none for this Java and Spark: reports start about 4 s slower "
                     "(python -m orchestrator.tools.spark_archive makes it; make setup does)"})
        rows.append(_s3a_row())
    rows.append(_s3_server_row())
    docker = _cmd_version(["docker", "version", "--format", "{{.Server.Version}}"])
    engine = bool(docker and docker[0].isdigit())
    rows.append({"what": "docker engine", "ok": engine, "detail": docker if engine else
                 "no engine answering (for --backend docker: .ci/docker installs docker.io and starts dockerd)"})
    local_helm = ROOT / ".tools" / "bin" / "helm"
    helm = _cmd_version([str(local_helm) if local_helm.exists() else "helm", "version", "--short"])
    rows.append({"what": "helm", "ok": helm is not None,
                 "detail": helm or "missing (.ci/tools installs it into .tools/bin; for the chart's checks)"})
    rows.append(_kubernetes_row())
    rows.append(_local_cluster_row())
    from node.adapters import ADAPTERS

    for adapter in ADAPTERS.values():
        missing = adapter.missing()
        rows.append({"what": f"implementation {adapter.name}", "ok": not missing,
                     "detail": "installed" if not missing else f"not installed: {adapter.install}"})
    return rows


def _s3_server_row() -> dict[str, Any]:
    from orchestrator.store.s3server import weed

    binary = weed(build=False)
    have = binary.exists()
    return {"what": "S3 server (bundled SeaweedFS)", "ok": have,
            "detail": str(binary) if have else "not built: `peerlab store serve` or `make test` builds it "
                                               "(Go 1.26; about 11 minutes the first time)"}


def _s3a_row() -> dict[str, Any]:
    from analysis import s3a

    try:
        jars = s3a.ensure_jars(fetch=False)
        return {"what": "Spark s3a jars (report s3:// in place)", "ok": True, "detail": str(jars[0].parent)}
    except s3a.S3aUnavailable as err:
        return {"what": "Spark s3a jars (report s3:// in place)", "ok": False, "detail": str(err)}


def _guest_row() -> dict[str, Any]:
    """Without netem here, the netem path is checked in a Debian guest (orchestrator/vm)."""
    from orchestrator.vm import image

    built, missing = image.find(), image.missing_tools()
    detail = (f"built ({built.dir}, kernel {built.kernel_version})" if built else
              f"not built: apt-get install {' '.join(missing)}, then peerlab vm build" if missing else
              "not built: peerlab vm build (about a minute)")
    return {"what": "netem guest (QEMU)", "ok": built is not None and not missing,
            "detail": detail + " -> the netem path on a stock Debian kernel: make test-netem, "
                               "or peerlab vm run -- CMD"}


def _kubernetes_row() -> dict[str, Any]:
    """Is a cluster configured (kubeconfig context), and does its API server answer?"""
    try:
        from kubernetes import client, config

        _, current = config.list_kube_config_contexts()
        config.load_kube_config()
        host = client.Configuration.get_default_copy().host
        version = client.VersionApi().get_code(_request_timeout=5).git_version
        return {"what": "kubernetes cluster", "ok": True,
                "detail": f"context {current['name']}: {host}, Kubernetes {version}"}
    except Exception as err:  # noqa: BLE001 - no kubeconfig, no server: said, not raised
        return {"what": "kubernetes cluster", "ok": False,
                "detail": f"none reachable ({str(err).splitlines()[0][:120] or err.__class__.__name__}); "
                          "for --backend kubernetes: sudo peerlab cluster up (a local 3-node kind cluster), "
                          "or point KUBECONFIG at a cluster"}


def _local_cluster_row() -> dict[str, Any]:
    """The local multi-node kind cluster (orchestrator/cluster): built? running? Ready?"""
    from orchestrator.cluster import lifecycle, programs
    from orchestrator.cluster.layout import Layout

    try:
        programs.locate(build=False)
    except programs.MissingProgram as err:
        return {"what": "local kubernetes cluster", "ok": False,
                "detail": f"not ready to start: {str(err).splitlines()[0]}"}
    state = Layout.default()
    st = lifecycle.status(state)
    if st["nodes_ready"]:
        store = st["store"]
        store_note = (f"; S3 store {'takes writes' if store['answers'] else 'NOT answering'} at "
                      f"{store['endpoint']} (. {store['settings']})" if store else "; no S3 store (up --no-store)")
        return {"what": "local kubernetes cluster", "ok": True,
                "detail": f"up, {len(st['nodes'])} nodes Ready: export KUBECONFIG={state.kubeconfig}{store_note}"}
    return {"what": "local kubernetes cluster", "ok": True,
            "detail": (f"partly up ({', '.join(st['containers'])}; nodes {st['nodes']}): sudo peerlab cluster status"
                       if st["containers"] else "built, not running: sudo peerlab cluster up (about 30 s)")}


def summary(rows: list[dict[str, Any]]) -> list[str]:
    ok = {r["what"]: r["ok"] for r in rows}
    lines = []
    if ok.get("root (or CAP_NET_ADMIN)") and ok.get("network namespaces + HTB"):
        mode = ("netem (kernel)" if ok.get("netem") else
                "delayline (HTB in the kernel, latency by NFQUEUE outside the nodes)" if ok.get("delay line (NFQUEUE)")
                else "none without --shaping transport (no netem, no delay line: latency only in peerlab's own "
                     "node transport, on request; adapter nodes cannot run)")
        lines.append(f"backend local: can run; shaping mode {mode}")
    else:
        lines.append("backend local: cannot run here (needs root, network namespaces and HTB)")
    if ok.get("root (or CAP_NET_ADMIN)") and ok.get("docker engine"):
        lines.append("backend docker: can run (needs the node image's base: python:3.12-slim or $PEERLAB_BASE_IMAGE)")
    else:
        lines.append("backend docker: cannot run here (needs root and a Docker engine)")
    if ok.get("kubernetes cluster") and ok.get("helm"):
        lines.append("backend kubernetes: can run (load the node image into the cluster first)")
    else:
        lines.append("backend kubernetes: cannot run here (needs helm and a reachable cluster)")
    lines.append("backend sim: can run (virtual time in one process; needs nothing else)")
    lines.append("reports: " + ("can run" if ok.get("java (for PySpark reports)") else "need Java (use --no-report meanwhile)"))
    return lines
