"""The Kubernetes client's settings, in one place for every process that speaks to a cluster (the
orchestrator's KubeCluster, the exec bridge a probe runs as a process of its own, admission): the
kubeconfig with its TLS files written into a private directory of the run's (`credentials_dir`),
else, inside a cluster, the pod's service account.

May import: the kubernetes client (lazily), orchestrator.procfs; nothing else of peerlab. kube_cluster.py, kube_exec.py and
kube_admission.py import it; it imports none of them.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

from orchestrator import procfs

CREDENTIALS_ENV = "PEERLAB_KUBE_CREDENTIALS_DIR"  # credentials_dir(), for the processes a run starts
PREFIX = "peerlab-kube-"  # then the pid of the process that made it


def credentials_dir() -> str:
    """Where the client library writes the kubeconfig's certificates and key for its TLS: a private
    directory made by the first process that asks (the orchestrator), removed at its exit, and named to
    the processes it starts through the environment, so that theirs go there too: the probes' exec
    bridges end by a kill, and left a private key each in /tmp when the library chose the place."""
    inherited = os.environ.get(CREDENTIALS_ENV)
    if inherited and os.path.isdir(inherited):
        return inherited
    made = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")  # the pid: `peerlab clean` finds a dead one's
    os.environ[CREDENTIALS_ENV] = made
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(made, ignore_errors=True))  # not a fork's exit
    return made


def orphaned_credentials() -> list[str]:
    """Credentials directories of this user whose process died without removing them (a SIGKILL):
    `peerlab clean --kubernetes` removes them."""
    root, out = tempfile.gettempdir(), []
    for name in os.listdir(root):
        pid = name.removeprefix(PREFIX).partition("-")[0]
        path = os.path.join(root, name)
        if not name.startswith(PREFIX) or not pid.isdigit() or os.path.islink(path) or not os.path.isdir(path):
            continue
        if os.stat(path).st_uid == os.geteuid() and not procfs.running(int(pid)):
            out.append(path)
    return sorted(out)


def client_config(context: str | None) -> Any:
    """The client's settings from the kubeconfig ($KUBECONFIG as it is now: the library reads it once,
    when first imported; `context`, else its current one), its TLS files written into
    `credentials_dir()`; else, inside a cluster, the pod's service account. RuntimeError if neither."""
    from kubernetes import client, config

    settings = client.Configuration()
    try:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None, context=context,
                                client_configuration=settings, temp_file_path=credentials_dir())
    except Exception as kube_err:  # noqa: BLE001 - maybe we run inside the cluster
        try:
            config.load_incluster_config(client_configuration=settings)
        except Exception:  # noqa: BLE001
            raise RuntimeError(f"no Kubernetes cluster configured ({kube_err}); set KUBECONFIG or "
                               "--kube-context, or create one: peerlab prepare kind") from None
    return settings

