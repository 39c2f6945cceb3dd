"""A report's Spark on Kubernetes (`peerlab report s3://... --master k8s`): the driver stays in the
report's process (client mode), its executors are pods of peerlab's Spark image
(orchestrator/builds/spark_image.py) in the cluster of the kubeconfig, reading the run's logs from its
object store through s3a and writing the tables back there.

- `k8s` alone is the kubeconfig's API server (`k8s://https://HOST:PORT`); a full `k8s://` URL is kept.
- The image: `spark.kubernetes.container.image` if given (`--spark-conf`, or $PEERLAB_SPARK_IMAGE);
  on the local cluster (`peerlab cluster up`) it is built and loaded into the workers, and the
  executors are kept on the workers; elsewhere it must be in a registry the cluster pulls from.
- The executors reach the driver at this machine's address on the route to the cluster's nodes.
- The store's keys go to the executors from a Secret made for the report and deleted after it (never
  in a pod's spec); the endpoint and region as plain settings.
- Executors: labelled `peerlab.report=<id>`, their service account's token not mounted, non-root;
  Spark deletes them as the session stops, and `finish` deletes any left (a driver that died leaves
  them to `peerlab clean --kubernetes`, which deletes every pod with that label whose report is over).

May import: orchestrator.backends.kube_cluster, orchestrator.record.host_state (the holder),
orchestrator.builds.spark_image, orchestrator.backends.docker and orchestrator.cluster
(lazily, for the local cluster), the kubernetes client, pyroute2; nothing of analysis/ but its s3a.
"""
from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

LABEL = "peerlab.report"
HOLDER = "peerlab.report/holder"  # the Secret's annotation: the driver's host/pid, as a run's lease holds it
EXECUTORS = 2
DIRECT_RESULT = "120m"  # under spark.rpc.message.maxSize (128 MiB), which carries it
EXECUTOR_MEMORY = "1g"
EXECUTOR_CPU_REQUEST = "0.25"  # a report's tasks are short; the run's pods keep their requests
STORE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
SESSION_KEY = "AWS_SESSION_TOKEN"  # temporary credentials' third part, given to the executors when set
IMAGE_ENV = "PEERLAB_SPARK_IMAGE"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


class SparkOnK8sError(RuntimeError):
    pass


def wants_k8s(master: str) -> bool:
    return master == "k8s" or master.startswith("k8s://")


@dataclass
class ClusterAnalysis:
    """One report's executors on the cluster: the settings for its session, and what to remove after."""

    master: str
    namespace: str
    report_id: str
    image: str
    conf: dict[str, str]
    core: Any = field(repr=False)
    secret: str = ""
    template: str = ""

    def executors(self) -> list[dict[str, str]]:
        """The report's executor pods now: name, cluster node, phase."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL}={self.report_id}",
                                             _request_timeout=30).items
        return [{"pod": p.metadata.name, "node": p.spec.node_name or "", "phase": p.status.phase or ""}
                for p in pods]

    def finish(self) -> None:
        """The Secret and any executor pod Spark left deleted (as `clean` does), and the pod template."""
        remove(self.core, self.namespace, self.report_id)
        if self.template:
            Path(self.template).unlink(missing_ok=True)


def prepare(master: str, namespace: str, context: str | None, conf: dict[str, str],
            say: Callable[[str], None] = print) -> ClusterAnalysis:
    """The cluster's side of a report on `master` (`k8s` or `k8s://URL`): the image there, the store's
    keys in a Secret, the executors' pod template; the Spark settings that use them (`conf`, the
    user's, win). SparkOnK8sError says what is missing."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from orchestrator.backends.kube_cluster import KubeCluster
    from orchestrator.record.host_state import holder

    kube = KubeCluster(namespace, context)
    kube.ensure_namespace()  # Pod Security `restricted`, as a run's: the executors meet it
    core = kube.core
    url = master if master.startswith("k8s://") else f"k8s://{kube.config.host}"
    local = _is_local_cluster(context)
    image = conf.get("spark.kubernetes.container.image") or os.environ.get(IMAGE_ENV) or ""
    workers: list[str] = []
    if local:
        workers = [n.metadata.name for n in core.list_node(_request_timeout=30).items
                   if CONTROL_PLANE_ROLE not in (n.metadata.labels or {})]
    if not image:
        if not local:
            raise SparkOnK8sError(
                "the executors' image: build it (`peerlab image build --spark`), push it to a registry your "
                "cluster pulls from, and name it: --spark-conf spark.kubernetes.container.image=REGISTRY/peerlab-spark:TAG "
                f"(or ${IMAGE_ENV})")
        image = _local_image(workers, say)
    missing = [k for k in (*STORE_KEYS, "AWS_ENDPOINT_URL") if not os.environ.get(k)]
    if missing:
        raise SparkOnK8sError(f"the store's settings are not in the environment ({', '.join(missing)}): the "
                              "executors read the run from the store with them (on the local cluster: "
                              ". /var/lib/peerlab/cluster/store/credentials.env)")
    driver = driver_address(core)  # before anything is made in the cluster: its error leaves nothing there
    keys = [*STORE_KEYS, *([SESSION_KEY] if os.environ.get(SESSION_KEY) else [])]
    report_id = secrets.token_hex(3)
    analysis = ClusterAnalysis(url, namespace, report_id, image, {}, core)
    analysis.secret = f"peerlab-report-{report_id}"
    try:
        core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name=analysis.secret, labels={LABEL: report_id},
                                         annotations={HOLDER: holder()}),
            string_data={k: os.environ[k] for k in keys}), _request_timeout=30)
    except ApiException as e:
        raise SparkOnK8sError(f"could not create the Secret {analysis.secret} in namespace {namespace} "
                              f"({e.status} {e.reason}): a report on the cluster needs the rights to create "
                              "secrets and pods there") from None
    analysis.template = _pod_template(report_id, required_nodes=workers)
    analysis.conf = {
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.namespace": namespace,
        **({"spark.kubernetes.context": context} if context else {}),
        "spark.kubernetes.executor.podTemplateFile": analysis.template,
        f"spark.kubernetes.executor.label.{LABEL}": report_id,
        "spark.kubernetes.executor.podNamePrefix": f"peerlab-report-{report_id}",
        "spark.kubernetes.executor.request.cores": EXECUTOR_CPU_REQUEST,
        # no ConfigMap of Spark's own for the executors (in client mode it has no owner: a killed driver
        # would leave it); they take the driver's settings when they register
        "spark.kubernetes.executor.disableConfigMap": "true",
        "spark.executor.instances": str(min(EXECUTORS, len(workers)) if workers else EXECUTORS),
        "spark.executor.cores": "1",
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.driver.host": driver,
        # the driver (outside the pod network) reaches no executor's block manager: a task's result goes
        # back on the executor's own connection up to this size, not fetched from it (above 1 MiB, Spark's
        # default, the marks of a 109 M-event run failed with "Failed to connect to <pod ip>")
        "spark.task.maxDirectResultSize": DIRECT_RESULT,
        # the executors are the report's workers: none is lost to a slow start
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
        **{f"spark.kubernetes.executor.secretKeyRef.{k}": f"{analysis.secret}:{k}" for k in keys},
        "spark.executorEnv.AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        **conf,
    }
    return analysis


def with_s3a_jars_in_image(conf: dict[str, str]) -> dict[str, str]:
    """s3a's settings for a cluster: the driver takes the jars from this machine (its class path), the
    executors have them in the image (spark.jars would ship 27 MB to each executor, at each report)."""
    jars = conf.pop("spark.jars", "")
    if jars:
        conf["spark.driver.extraClassPath"] = ":".join(j for j in jars.split(",") if j)
    return conf


def driver_address(core: Any) -> str:
    """This machine's address on the route to the cluster's first node: where executors reach the driver."""
    from pyroute2 import IPRoute

    for node in core.list_node(_request_timeout=30).items:
        for address in node.status.addresses or []:
            if address.type == "InternalIP":
                with IPRoute() as ipr:
                    route = ipr.route("get", dst=address.address)
                source = route[0].get_attr("RTA_PREFSRC") if route else None
                if source:
                    return source
    raise SparkOnK8sError("no route from this machine to the cluster's nodes: the executors could not reach the driver "
                          "(run the report where the nodes' addresses are reachable, or set spark.driver.host)")


def _is_local_cluster(context: str | None) -> bool:
    """Is the kubeconfig's context (`context`, else its current one) the local kind cluster's?"""
    from kubernetes import config

    from orchestrator.cluster import layout as L

    try:
        _, current = config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG") or None)
    except Exception:  # noqa: BLE001 - inside a cluster, no kubeconfig
        return False
    return (context or (current or {}).get("name")) == L.CONTEXT


def _local_image(workers: list[str], say: Callable[[str], None]) -> str:
    from orchestrator.backends.docker import docker_client
    from orchestrator.builds import spark_image
    from orchestrator.cluster import kind

    tag = spark_image.build(docker_client(), say=say)
    kind.load([tag], say, nodes=workers or None)
    return tag


def _pod_template(report_id: str, required_nodes: list[str]) -> str:
    """The executors' pod template: no service account token, a non-root user, spread over the nodes,
    and on the local cluster only on its workers (which hold the image)."""
    affinity: dict[str, Any] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": {LABEL: report_id}}}}]}}
    if required_nodes:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": required_nodes}]}]}}
    template = {"apiVersion": "v1", "kind": "Pod",
                "spec": {"automountServiceAccountToken": False, "affinity": affinity,
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 185, "runAsGroup": 185,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "executor",
                                         "securityContext": {"allowPrivilegeEscalation": False,
                                                             "capabilities": {"drop": ["ALL"]}}}]}}
    fd, path = tempfile.mkstemp(prefix=f"peerlab-report-{report_id}-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(template, f)
    return path


def reports(core: Any, namespace: str) -> dict[str, str | None]:
    """The reports that have executors or a Secret in `namespace`: report id -> its driver (host/pid),
    None when its Secret is gone (its driver had finished, or was ending)."""
    found: dict[str, str | None] = {}
    for secret in core.list_namespaced_secret(namespace, label_selector=LABEL, _request_timeout=30).items:
        found[secret.metadata.labels[LABEL]] = (secret.metadata.annotations or {}).get(HOLDER, "")
    for pod in core.list_namespaced_pod(namespace, label_selector=LABEL, _request_timeout=30).items:
        found.setdefault(pod.metadata.labels[LABEL], None)
    return found


def remove(core: Any, namespace: str, report_id: str) -> None:
    """A report's executors and Secret, deleted (what `peerlab clean --kubernetes` does for a dead driver)."""
    selector = f"{LABEL}={report_id}"
    core.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0,
                                          _request_timeout=30)
    core.delete_collection_namespaced_secret(namespace, label_selector=selector, _request_timeout=30)
