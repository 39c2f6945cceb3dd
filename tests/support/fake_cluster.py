"""A stand-in for `orchestrator.backends.kube_cluster.KubeCluster` with the same methods, for the kubernetes backend's
tests on a machine where no Kubernetes server can run: the release's values go through the real
helm (the chart's schema) and its pods become local network namespaces, each running the node
image's real main process (the node supervisor) in a mount namespace of its own (tmpfs volumes at
the chart's paths, as emptyDirs). `exec` enters a pod's namespaces with nsenter, as the exec API
enters a container; the control API is reached on the pod's address from this namespace (the real
cluster proxies it through the API server). An adapter's pod gets what its image holds at the same
paths (/opt/peerlab/tools from .tools/, /opt/peerlab/adapter from the adapter's folder, on a tmpfs
over /opt) and the supervisor the chart's PEERLAB_NODE_COMMAND. Only the Kubernetes API itself is
not exercised.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from pyroute2 import IPRoute, NetNS

from node.adapters import PEERLAB, TOOLS, get_adapter
from orchestrator.backends.base import RunContext, file_tail
from orchestrator.backends.kube_cluster import CHART, ExecResult, helm_binary
from orchestrator.backends.local import LocalBackend
from orchestrator.model.plan import RunPlan
from orchestrator.run.cleanup import remove_run_objects
from orchestrator.run.node_client import ControlClient

POD_SCRIPT = ("mount -t tmpfs events /var/lib && mkdir -p /var/lib/peerlab/events && "
              "mount -t tmpfs supervisor /run && mkdir -p /run/peerlab && "
              "exec {python} -m node.supervisor serve --dir /run/peerlab")
# an adapter's image, as its Dockerfile lays it out
IMAGE_SCRIPT = ("mount -t tmpfs image /opt && mkdir -p /opt/peerlab/tools /opt/peerlab/adapter && "
                "mount --bind {tools} /opt/peerlab/tools && cp -r {adapter}/. /opt/peerlab/adapter/ && ")
NODE_MODULES = ("rm -f /opt/peerlab/adapter/node_modules && "
                "ln -s /opt/peerlab/tools/{name}/node_modules /opt/peerlab/adapter/node_modules && ")


class FakeCluster:
    instances: list["FakeCluster"] = []

    def __init__(self, namespace: str, context: str | None = None):
        self.namespace = namespace
        self.installs: list[dict[str, Any]] = []
        self.rendered: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}  # pod -> netns, ip, supervisor process, output file
        self.network: LocalBackend | None = None
        self.host_if = ""
        FakeCluster.instances.append(self)

    def install(self, release: str, values: dict[str, Any], values_file: Path) -> None:
        values_file.write_text(yaml.safe_dump(values, sort_keys=False))
        render = subprocess.run([helm_binary(), "template", release, str(CHART), "--namespace", self.namespace,
                                 "-f", str(values_file)], capture_output=True, text=True)
        if render.returncode != 0:
            raise RuntimeError(f"helm install {release} failed: {render.stderr.strip()}")
        self.installs.append(values)
        self.rendered = [d for d in yaml.safe_load_all(render.stdout) if d]
        plan = RunPlan.model_validate_json(values["plan"])
        short = values["run"]["short"]
        scratch = Path(f"/tmp/peerlab-fake-{short}")
        scratch.mkdir(parents=True, exist_ok=True)
        ctx = RunContext(values["run"]["id"], short, scratch, scratch, plan, values["control"]["token"])
        self.network = LocalBackend(ctx)
        self.network.create_network()
        self._connect_host(short)
        env = {**os.environ, "PEERLAB_CONTROL_TOKEN": values["control"]["token"], "PYTHONUNBUFFERED": "1"}
        for sts in (d for d in self.rendered if d["kind"] == "StatefulSet"):
            labels = sts["spec"]["selector"]["matchLabels"]
            members = [n for n in plan.nodes if (n.role == "honest") == (labels["peerlab.role"] == "node")
                       and n.implementation == labels["peerlab.implementation"]]
            assert len(members) == sts["spec"]["replicas"], (sts["metadata"]["name"], len(members))
            (node_container,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "node"]
            pod_env = {**env, **{e["name"]: e["value"] for e in node_container["env"] if "value" in e}}
            name = labels["peerlab.implementation"]
            image = ""
            if name != PEERLAB:
                image = IMAGE_SCRIPT.format(tools=TOOLS, adapter=get_adapter(name).directory)
                if (TOOLS / name / "node_modules").exists():
                    image += NODE_MODULES.format(name=name)
            for i, node in enumerate(members):
                pod = f"{sts['metadata']['name']}-{i}"
                out = scratch / f"{pod}.out"
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", self.network.node_netns(node.id), "unshare", "-m", "--propagation",
                     "private", "sh", "-c", image + POD_SCRIPT.format(python=sys.executable)],
                    stdout=open(out, "wb"), stderr=subprocess.STDOUT, env=pod_env, cwd=str(CHART.parent.parent))
                self.pods[pod] = {"ip": self.network.address(node.id), "proc": proc, "out": out}

    def _connect_host(self, short: str) -> None:
        """A veth from this namespace into the run's switch: the control API's path to the pods."""
        assert self.network is not None
        self.host_if = f"pl{short}h"
        with IPRoute() as ipr:
            ipr.link("add", ifname=self.host_if, kind="veth", peer={"ifname": "host", "net_ns_fd": self.network.switch})
            index = ipr.link_lookup(ifname=self.host_if)[0]
            ipr.addr("add", index=index, address=f"10.{self.network.subnet}.255.254", prefixlen=16)
            ipr.link("set", index=index, state="up")
        with NetNS(self.network.switch, flags=0) as sw:
            port = sw.link_lookup(ifname="host")[0]
            sw.link("set", index=port, master=sw.link_lookup(ifname="br0")[0], state="up")

    def wait_pods(self, selector: str, names: list[str], timeout: float,
                  say: Callable[[str], None] = lambda _: None) -> dict[str, str]:
        assert set(names) == set(self.pods), (sorted(names), sorted(self.pods))
        return {name: pod["ip"] for name, pod in self.pods.items()}

    def pod_uid(self, pod: str) -> str | None:
        return str(self.pods[pod]["proc"].pid) if pod in self.pods else None

    def exec(self, pod: str, container: str, argv: list[str], stdin: str | None = None,
             timeout: float = 60) -> ExecResult:
        assert container in {c["name"] for d in self.rendered if d["kind"] == "StatefulSet"
                             for c in d["spec"]["template"]["spec"]["containers"]}
        argv = [sys.executable if a in ("python", "python3") else a for a in argv]
        result = subprocess.run([*self._enter(pod), *argv], input=stdin, capture_output=True,
                                text=True, timeout=timeout, cwd=str(CHART.parent.parent))
        return ExecResult(result.returncode, result.stdout, result.stderr)

    def _enter(self, pod: str) -> list[str]:
        return ["nsenter", "-t", str(self.pods[pod]["proc"].pid), "-m", "-n"]

    def python_in(self, pod: str, container: str) -> list[str]:
        return [*self._enter(pod), sys.executable]

    def logs(self, pod: str, container: str, tail: int | None = None) -> str:
        return file_tail(self.pods[pod]["out"], tail or 10**9)

    def control_client(self, pod: str, port: int, node_id: str, token: str) -> ControlClient:
        return ControlClient(node_id, token, url=f"http://{self.pods[pod]['ip']}:{port}")

    def uninstall(self, release: str, timeout: float = 120) -> None:
        for pod in self.pods.values():
            pod["proc"].terminate()
        deadline = time.monotonic() + 10
        for pod in self.pods.values():
            try:
                pod["proc"].wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pod["proc"].kill()
                pod["proc"].wait()
        if self.network is not None:
            remove_run_objects(self.network.ctx.short, str(self.network.ctx.scratch))
        self.pods.clear()  # the host veth went with the switch namespace
