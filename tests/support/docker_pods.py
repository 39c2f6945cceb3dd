"""A stand-in for `orchestrator.backends.kube_cluster.KubeCluster` with the same methods, for the
kubernetes backend's tests on a machine where no Kubernetes server can run: the release is rendered
by the real helm (the chart's schema and templates), and every pod of its StatefulSets runs as Docker
containers built from the rendered pod spec (tests/support/pod_spec.py: the image, command, env,
non-root user, capabilities, read-only root, volumes and memory limits the chart asks for), on a
Docker network of its own. The control API and the node supervisor's are reached on the pod's address
from the host (a cluster proxies them through the API server); the shaping daemon's commands are
`docker exec` into its container, as the exec API runs a command in one (`docker exec -i`, kept open,
for its agent). The shaping daemon of the one
"cluster node" (this machine) is a privileged container of peerlab's image in the host's PID
namespace, where a pod's network namespace is its node container's /proc/<pid>/ns/net (a cluster's
daemon asks the CRI instead). Not a cluster: no API server, scheduler, probes or Pod Security
admission; docs/backends.md says what only a real cluster checks.
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import yaml

from orchestrator.backends.docker import LABEL, docker_client, remove_docker_objects
from orchestrator.backends.kube_cluster import CHART, write_values
from orchestrator.backends.kube_exec import ExecResult
from orchestrator.control.node_client import ControlClient
from orchestrator.helm import helm_binary
from orchestrator.shaping import agent
from orchestrator.shaping.line_channel import PipeLines

MACHINE = "docker"  # the one cluster node


class DockerPods:
    instances: list["DockerPods"] = []

    def __init__(self, namespace: str, context: str | None = None):
        self.namespace = namespace
        self.client = docker_client()
        self.installs: list[dict[str, Any]] = []
        self.rendered: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}  # pod -> containers by name
        self.shaper: Any = None  # the shaping daemon's container
        self.short = ""
        DockerPods.instances.append(self)

    def install(self, release: str, values: dict[str, Any], values_file: Path) -> None:
        from tests.support.pod_spec import run_pod

        write_values(values, values_file)
        render = subprocess.run([helm_binary(), "template", release, str(CHART), "--namespace", self.namespace,
                                 "-f", str(values_file)], capture_output=True, text=True, timeout=120)
        if render.returncode != 0:
            raise RuntimeError(f"helm install {release} failed: {render.stderr.strip()}")
        self.installs.append(values)
        self.rendered = [d for d in yaml.safe_load_all(render.stdout) if d]
        self.short = values["run"]["short"]
        labels = {LABEL: self.short}
        network = self.client.networks.create(release, driver="bridge", labels=labels).name
        volumes = values_file.parent / "pod-volumes"
        volumes.mkdir(exist_ok=True)
        env = {"PEERLAB_CONTROL_TOKEN": values["control"]["token"]}  # the Secret's value
        for sts in (d for d in self.rendered if d["kind"] == "StatefulSet"):
            for ordinal in range(sts["spec"]["replicas"]):
                self.pods[f"{sts['metadata']['name']}-{ordinal}"] = run_pod(
                    self.client, sts, self.rendered, volumes, labels, env=env, ordinal=ordinal, network=network)
        image = f"{values['image']['repository']}:{values['image']['tag']}"
        self.shaper = self.client.containers.run(
            image, entrypoint=["python3", "-m", "orchestrator.shaping", "--hold"], user="0", privileged=True,
            pid_mode="host", network_mode="none", labels=labels, name=f"{release}-shaper", detach=True)

    def wait_pods(self, selector: str, names: list[str], timeout: float,
                  say: Callable[[str], None] = lambda _: None,
                  check_stop: Callable[[], None] = lambda: None) -> dict[str, str]:
        """As the real one: the pods' IPs once each runs, `check_stop` called while waiting."""
        assert set(names) == set(self.pods), (sorted(names), sorted(self.pods))
        deadline = time.monotonic() + timeout
        ips: dict[str, str] = {}
        for name, containers in self.pods.items():
            while True:
                check_stop()
                for container in containers.values():
                    container.reload()
                if all(c.status == "running" for c in containers.values()):
                    break
                if time.monotonic() > deadline or any(c.status == "exited" for c in containers.values()):
                    raise RuntimeError(f"pod {name} did not start: " + "; ".join(
                        f"{n} {c.status}: {c.logs(tail=5).decode(errors='replace').strip()}"
                        for n, c in containers.items()))
                time.sleep(0.2)
            (network,) = containers["node"].attrs["NetworkSettings"]["Networks"].values()
            ips[name] = network["IPAddress"]
        return ips

    def pod_placement(self, selector: str) -> dict[str, tuple[str, str]]:
        """Every pod runs on this machine: one cluster node, one clock."""
        return {pod: (MACHINE, containers["node"].id) for pod, containers in self.pods.items()}

    def pod_uid(self, pod: str) -> str | None:
        return self.pods[pod]["node"].id if pod in self.pods else None

    # the shaping daemon -----------------------------------------------------------------------
    def shapers(self) -> dict[str, str]:
        return {MACHINE: self.shaper.name} if self.shaper is not None else {}

    def shaper_lines(self, node: str) -> PipeLines:
        assert node == MACHINE, node
        return PipeLines(["docker", "exec", "-i", self.shaper.id, *agent.ARGV])

    def shaper_exec(self, node: str, argv: list[str], timeout: float = 60) -> ExecResult:
        done = subprocess.run(["docker", "exec", self.shaper.id, *argv], capture_output=True, text=True, timeout=timeout)
        return ExecResult(done.returncode, done.stdout, done.stderr)

    def pod_netns(self, pods_by_node: dict[str, list[str]], agents: dict[str, Any]) -> dict[str, str]:
        """No CRI here: the pod's node container's process, as the shaper container (pid namespace of the
        host) sees it."""
        assert set(pods_by_node) <= set(agents), "a pod's cluster node has no open agent"
        found = {}
        for pods in pods_by_node.values():
            for pod in pods:
                node = self.pods[pod]["node"]
                node.reload()
                found[pod] = f"/proc/{node.attrs['State']['Pid']}/ns/net"
        return found

    def python_in_netns(self, node: str, netns: str) -> list[str]:
        return ["docker", "exec", "-i", self.shaper.id, *agent.python_in(netns)]

    def logs(self, pod: str, container: str, tail: int | None = None) -> str:
        return self.pods[pod][container].logs(tail=tail or "all").decode(errors="replace")

    def _address(self, pod: str) -> str:
        (network,) = self.pods[pod]["node"].attrs["NetworkSettings"]["Networks"].values()
        return network["IPAddress"]

    def control_client(self, pod: str, port: int, node_id: str, token: str) -> ControlClient:
        return ControlClient(node_id, token, url=f"http://{self._address(pod)}:{port}")

    def pod_http(self, pod: str, port: int, method: str, path: str, token: str, body: dict | None = None,
                 timeout: float = 30) -> tuple[int, bytes]:
        """Straight to the pod's address (a cluster goes through the API server's proxy)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{self._address(pod)}:{port}{path}", data=data, method=method,
                                     headers={"X-Peerlab-Token": token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()
        except OSError as err:
            raise RuntimeError(f"{method} {path} on pod {pod}:{port}: {err.__class__.__name__} {err}") from None

    def uninstall(self, release: str, timeout: float = 120) -> None:
        if self.short:
            remove_docker_objects(self.short, self.client)
        self.pods.clear()


def main(argv: list[str]) -> int:
    """`python -m tests.support.docker_pods peerlab-args...`: the real CLI, its kubernetes backend on
    this stand-in (so a test can run it as another user, as a cluster's user would run peerlab)."""
    from orchestrator.backends import kubernetes
    from orchestrator.cli import main as peerlab

    kubernetes.connect = DockerPods
    return peerlab(argv)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
