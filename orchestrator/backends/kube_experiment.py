"""A whole experiment inside the cluster: `peerlab run --backend kubernetes --in-cluster`.

The release is the chart's experiment (charts/peerlab/templates/experiment.yaml, what `helm install
... --set-file scenario=...` makes): a Job whose orchestrator, from the orchestrator's image, runs the
scenario with the run's nodes as a release of its own, over the pod network and the shaping daemons,
and stores every log in an s3:// store the cluster reaches. From here: install it, follow the Job's
log as the run's progress, learn the run's id from its last line, and uninstall it (at the end, or at
a signal: the Job's pod then gets SIGTERM and stores what it has). Fetching and reporting the run
from the store is the CLI's (`peerlab report URL --local-copy`).

May import: orchestrator.backends.kube_cluster, orchestrator.builds, orchestrator.helm, node.paths.
"""
from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path
from typing import Callable

from node.paths import ROOT
from orchestrator.backends import kube_cluster
from orchestrator.helm import helm

CHART = ROOT / "charts" / "peerlab"
POLL_S = 1.0


class ExperimentError(RuntimeError):
    pass


class Experiment:
    """One experiment release `exp<6 hex>` in `namespace`."""

    def __init__(self, cluster: kube_cluster.KubeCluster, scenario: Path, run_args: list[str], store: str,
                 store_secret: str, image_tag: str):
        self.cluster, self.scenario, self.run_args = cluster, scenario, run_args
        self.store, self.store_secret, self.image_tag = store, store_secret, image_tag
        self.release = f"exp{secrets.token_hex(3)}"
        self.job = f"{self.release}-experiment"
        self.installed = False

    def install(self, values_file: Path) -> None:
        repository, _, tag = self.image_tag.rpartition(":")
        values = {"experiment": {"image": {"repository": repository, "tag": tag},
                                 "store": self.store, "storeSecret": self.store_secret, "args": self.run_args,
                                 "shaperNamespace": self.cluster.shaper_namespace}}
        values_file.write_text(json.dumps(values))
        self.cluster.ensure_namespace()
        done = self._helm("install", self.release, str(CHART), "--set-file", f"scenario={self.scenario}",
                                  "-f", str(values_file), timeout=120)
        if done.returncode != 0:
            raise ExperimentError(f"helm install {self.release}: {done.stderr.strip()}")
        self.installed = True

    def _helm(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return helm(*args, namespace=self.cluster.namespace, context=self.cluster.context, timeout=timeout)

    def _pod(self) -> tuple[str, str, str]:
        """The Job's pod: (name, phase, why it waits); ("", "Gone", "") before it exists or after."""
        pods = self.cluster.core.list_namespaced_pod(self.cluster.namespace, label_selector=f"job-name={self.job}",
                                                     _request_timeout=kube_cluster.REST_TIMEOUT).items
        if not pods:
            return "", "Gone", ""
        pod = pods[0]
        waiting = [s.state.waiting.reason for s in pod.status.container_statuses or []
                   if s.state and s.state.waiting and s.state.waiting.reason]
        return pod.metadata.name, pod.status.phase, ", ".join(waiting)

    def follow(self, say: Callable[[str], None], timeout: float) -> tuple[bool, str]:
        """The Job's log, line by line through `say`, until its orchestrator ends: (it succeeded, the
        run directory inside the pod: the last line that is an absolute path; else the last line).
        Not simply the last line: the log merges the orchestrator's stdout (the path) and stderr (its
        verdict line) in whichever order they came."""
        deadline = time.monotonic() + timeout
        name, phase, why = self._pod()
        while phase in ("Gone", "Pending"):
            if "ImagePull" in why or "ErrImageNeverPull" in why:
                raise ExperimentError(f"the cluster cannot get the orchestrator's image {self.image_tag} ({why}): "
                                      "`peerlab image build --orchestrator`, then `peerlab cluster load TAG` (or "
                                      "push it where your cluster pulls from)")
            if time.monotonic() > deadline:
                raise ExperimentError(f"the experiment's pod did not start within {timeout:.0f} s "
                                      f"(kubectl describe job {self.job} -n {self.cluster.namespace})")
            time.sleep(POLL_S)
            name, phase, why = self._pod()
        last = ""
        stream = self.cluster.core.read_namespaced_pod_log(name, self.cluster.namespace, container="orchestrator",
                                                           follow=True, _preload_content=False)
        pending = b""
        try:
            for chunk in stream.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace").rstrip()
                    if text:
                        say(text)
                        last = _kept(last, text)
        finally:
            stream.release_conn()
        if pending.strip():
            text = pending.decode(errors="replace").strip()
            say(text)
            last = _kept(last, text)
        while (phase := self._pod()[1]) in ("Running", "Pending"):
            if time.monotonic() > deadline:
                raise ExperimentError(f"the experiment's pod still runs after {timeout:.0f} s")
            time.sleep(POLL_S)
        return phase == "Succeeded", last

    def uninstall(self, timeout: float = 120) -> None:
        """The Job first, waiting for its pod to be gone (an orchestrator still running gets SIGTERM and
        removes its nodes' release with the rights the release gives it), then the release."""
        if not self.installed:
            return
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            client.BatchV1Api(self.cluster.api_client).delete_namespaced_job(
                self.job, self.cluster.namespace, propagation_policy="Foreground",
                _request_timeout=kube_cluster.REST_TIMEOUT)
        except ApiException as e:
            if e.status != 404:
                raise
        deadline = time.monotonic() + timeout
        while self._pod()[1] != "Gone" and time.monotonic() < deadline:
            time.sleep(POLL_S)
        done = self._helm("uninstall", self.release, "--wait", "--ignore-not-found", "--timeout", "120s",
                                  timeout=150)
        if done.returncode != 0:
            raise ExperimentError(f"helm uninstall {self.release}: {done.stderr.strip()}")
        self.installed = False


def _kept(last: str, line: str) -> str:
    """Of the log's lines so far, the one `follow` answers with: the last absolute path, else the last line."""
    return last if last.startswith("/") and not line.startswith("/") else line
