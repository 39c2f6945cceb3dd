"""The Kubernetes backend: every node a pod of the peerlab chart (charts/peerlab), one release per run.

    release pl<short>          StatefulSets pl<short>-nodes (peerlab's honest nodes, ordinal i = the
                               i-th of the plan), pl<short>-attackers and pl<short>-<implementation>
                               for each adapter's nodes (node/adapters), headless Service, Secret
                               (control token), ConfigMap (the plan)
    pod                        one container: the node supervisor (`node.supervisor`), non-root,
                               no capabilities, from the image of the group's implementation
    shaping daemon             one per cluster node (charts/peerlab-shaper, installed once per cluster):
                               every pod's link is shaped from outside the pod

A pod lives for the whole run: nodes start, crash (SIGKILL) and restart inside it through the
supervisor, so the pod's address and tc tree stay, as a namespace does on the local backend. The
supervisor's HTTP API (port 7001) and the node's control API (7000) are reached through the API
server's pod proxy: a start, kill or status is one request, no exec. (Deleting
the pod instead would give it a new address and an empty tc tree in the middle of the run.) The far
end of a pod's link belongs to the cluster, so the download cap and partitions sit on an ifb that
receives the pod's ingress (`ops.RedirectIngress`), and the pod's TCP settings (`ops.Sysctls`) are
written by the daemon too. The pods' clocks are the cluster nodes' own, so
the runner measures their offsets.
The shaping daemon of each cluster node the run's pods are on runs a shaper agent for the whole run
(orchestrator/shaping/agent.py), kept open over one exec stream per cluster node: it finds each pod's
network namespace through the CRI, and every tc operation on a pod (its tree, a partition, a
degrade), its kernel counters (its eth0 is the node's link) and, on cluster kernels without netem,
the node's one delay line (at real-time priority, for every pod there) are lines on that stream. The
pods themselves hold no capability. An adapter's node has no control API: the runner follows its
event log through the supervisor (GET /events), stops it with SIGTERM through it, and probes its links from
its cluster node's daemon, entering the pod's namespace (`KubeCluster.python_in_netns`, handed to the
run's namespace access). Everything
else is the shared runner.
"""
from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from node import supervisor
from node.adapters import PEERLAB, get_adapter
from node.contract import ContractConfig
from orchestrator.backends import kube_admission, kube_cluster
from orchestrator.backends.base import Backend, RunContext
from orchestrator.builds import node_image as image
from orchestrator.control.node_client import ControlClient
from orchestrator.shaping import agent, ops, tcp_settings
from orchestrator.shaping.mechanisms import LinkEnds
from orchestrator.shaping.namespace_access import ThroughDaemons

DATA_PORT = 4001
CONTROL_PORT = 7000
EVENTS_DIR = "/var/lib/peerlab/events"
SUPERVISOR_PORT = supervisor.PORT  # the node supervisor's API
IFB = "ifb0"
STATUS_TTL = 1.0  # seconds a node's supervisor status is trusted (each query is a round trip to the API server)
# the pod's link, as the pod sees it: what eth0 transmits is what the pod's node sent
COUNTERS = {"sent_bytes": "tx_bytes", "received_bytes": "rx_bytes",
            "sent_packets": "tx_packets", "received_packets": "rx_packets"}


def image_values(tag: str) -> dict[str, str]:
    repository, _, version = tag.rpartition(":")
    return {"repository": repository, "tag": version, "pullPolicy": "IfNotPresent"}


def _answer(code: int, raw: bytes) -> dict[str, Any]:
    """The supervisor's JSON answer; else {"error": ...} with what came instead (a refused dial is the
    API server's Status, whose message says so)."""
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return {"error": f"HTTP {code}: {raw[:300].decode(errors='replace')}"}
    if code != 200 and "error" not in answer:
        return {"error": f"HTTP {code}: {answer.get('message') or raw[:300].decode(errors='replace')}"}
    return answer


def connect(namespace: str, context: str | None):
    """The cluster of the kubeconfig (tests put a fake one here)."""
    return kube_cluster.KubeCluster(namespace, context)


class KubernetesBackend(Backend):
    name = "kubernetes"
    round_trips = True
    # a look is a request per pod through the API server's proxy, 30 at once: with looks every 10 s the
    # quickstart's nodes' loops came out late on 2 cores in a full suite's run; one look at the drain's end
    exit_watch_s = None
    shared_clock = False
    download_side = "an ifb in the pod, fed by its ingress"
    counters_where = "each pod's eth0, read in the pod (by its cluster node's shaping daemon)"
    poll_s = 0.5  # each poll is a request per node through the API server's proxy
    runs_adapters = True
    adapters_in_images = True
    has_delayline = True
    logs_on_host = False  # copied out of the pods at teardown
    needs_root = False  # the cluster's API server and helm do the privileged work

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        opts = kube_cluster.settings()
        self.cluster = connect(opts["namespace"], opts["context"])
        self.release = f"pl{ctx.short}"
        self.image = opts["image"] or image.image_tag()
        self.groups: dict[str, list[str]] = {}  # StatefulSet suffix -> its nodes, ordinal order
        for n in ctx.plan.nodes:
            group = "attackers" if n.role != "honest" else "nodes" if n.implementation == PEERLAB else n.implementation
            self.groups.setdefault(group, []).append(n.id)
        self.pods = {node_id: f"{self.release}-{group}-{i}" for group, members in self.groups.items()
                     for i, node_id in enumerate(members)}
        self.node_of_pod = {pod: node_id for node_id, pod in self.pods.items()}
        self.ips: dict[str, str] = {}
        self.uids: dict[str, str | None] = {}
        self.cluster_nodes: dict[str, str] = {}  # node -> the cluster node its pod runs on
        self._status: dict[str, tuple[float, dict[str, Any]]] = {}
        self.agents: dict[str, agent.ShaperAgent] = {}  # cluster node -> its shaping daemon's agent
        self.netns: dict[str, str] = {}  # pod -> its network namespace file, as its daemon sees it
        # shaping in a pod's namespace by the daemon of its cluster node, a request per cluster node;
        # the delay line of each cluster node, and the probes' Pythons in the pods, through it too
        self.namespaces = ThroughDaemons(self.agents, self._machine, lambda pod: self.netns[pod],
                                         lambda machine, netns: self.cluster.python_in_netns(machine, netns),
                                         self.each)
        self.installed = False
        for sub in ("events", "out"):
            (ctx.scratch / sub).mkdir(parents=True, exist_ok=True)

    # names and addresses -----------------------------------------------------------------------
    def address(self, node_id: str) -> str:
        return self.ips[node_id]

    def data_port(self, node_id: str) -> int:
        return DATA_PORT

    def link_ends(self, node_id: str) -> LinkEnds:
        pod = self.pods[node_id]
        return LinkEnds(pod, "eth0", pod, IFB)

    def clock_domains(self) -> dict[str, str]:
        return {n: c for n, c in self.cluster_nodes.items() if c}

    def control_endpoint(self, node_id: str) -> dict[str, Any]:
        return {"host": self.ips[node_id], "port": CONTROL_PORT}

    def event_log_path(self, node_id: str) -> str:
        return f"{EVENTS_DIR}/{node_id}.jsonl"

    def values(self) -> dict[str, Any]:
        """The chart's values for this run (validated by the chart's values.schema.json)."""
        plan = self.ctx.plan
        adapters = [{"implementation": name, "count": len(self.groups[name]),
                     "image": image_values(kube_cluster.adapter_image(name) or image.image_tag(implementation=name)),
                     "command": get_adapter(name).argv("{config}", image.IMAGE_TOOLS, image.IMAGE_ADAPTER)}
                    for name in sorted(set(self.groups) - {"nodes", "attackers"})]
        return {"run": {"id": self.ctx.run_id, "short": self.ctx.short},
                "image": image_values(self.image),
                "protocol": plan.protocol,
                "nodes": {"count": len(self.groups.get("nodes", []))},
                "attackers": {"count": len(self.groups.get("attackers", []))},
                "adapters": adapters,
                "control": {"token": self.ctx.token},
                "ports": {"data": DATA_PORT, "control": CONTROL_PORT, "supervisor": SUPERVISOR_PORT},
                "resources": kube_admission.node_resources(),
                "clockShiftNs": self._clock_shifts(adapters),
                "plan": plan.model_dump_json()}

    @staticmethod
    def _clock_shifts(adapters: list[dict[str, Any]]) -> dict[str, int]:
        shifts = kube_cluster.clock_shifts()
        if shifts and adapters:  # their clocks, and the probe that measures them, are not moved
            raise RuntimeError("PEERLAB_K8S_CLOCK_SHIFTS moves only peerlab's nodes' clocks: a run with adapter "
                               f"nodes ({', '.join(a['implementation'] for a in adapters)}) cannot use it")
        return shifts

    # the network: install the release, learn the pods -----------------------------------------
    def create_network(self) -> None:
        n = len(self.pods)
        began = time.monotonic()

        def open_agent(machine: str) -> agent.ShaperAgent:
            self.check_stop()
            opened = agent.ShaperAgent(self.cluster.shaper_lines(machine), f"the shaping daemon on {machine}")
            self.agents[machine] = opened  # teardown closes it, even if the check fails
            opened.check_version()
            return opened

        # the daemons' agents opened while the cluster makes the pods: once 30 pods start their nodes'
        # standbys the machine is busy, and an agent's start (an exec, a Python) took seconds there
        # instead of a fraction of one (no more daemons than pods: on a large cluster, as pods land).
        # At best effort: a daemon that fails here (its node NotReady, say) matters only if a pod lands
        # there, and is then opened again below, where its error stops the run
        def open_ahead() -> None:
            def attempt(machine: str) -> None:
                try:
                    open_agent(machine)
                except Exception:  # noqa: BLE001 - see above
                    failed = self.agents.pop(machine, None)
                    if failed is not None:
                        failed.close()
            daemons = sorted(self.cluster.shapers())
            self.each(attempt, daemons if len(daemons) <= n else [])

        values = self.values()
        with ThreadPoolExecutor(max_workers=1) as opening:
            opened = opening.submit(open_ahead)
            self.cluster.install(self.release, values, self.ctx.scratch / "values.yaml")
            self.installed = True
            ips_by_pod = self.cluster.wait_pods(f"peerlab.run={self.ctx.short}", list(self.pods.values()),
                                                timeout=120 + 0.5 * n,
                                                say=self._say,
                                                check_stop=self.check_stop)
            opened.result()
        placement = self.cluster.pod_placement(f"peerlab.run={self.ctx.short}")
        for node_id, pod in self.pods.items():
            self.ips[node_id] = ips_by_pod[pod]
            self.cluster_nodes[node_id], self.uids[node_id] = placement.get(pod, ("", None))
        machines = sorted({self.cluster_nodes[n] for n in self.pods})
        self._say(f"  {n} pods running on {len(machines)} cluster nodes in {time.monotonic() - began:.1f}s")
        for idle in set(self.agents) - set(machines):  # no pod of this run there
            self.agents.pop(idle).close()
        by_machine = {m: [self.pods[n] for n in self.pods if self.cluster_nodes[n] == m] for m in machines}

        def find_netns() -> None:
            self.each(open_agent, [m for m in machines if m not in self.agents])
            self.netns = self.cluster.pod_netns(by_machine, self.agents)

        # side by side: every supervisor's API up; each pod's network namespace, found by its daemon
        # through the CRI (one request per cluster node)
        self.each(lambda job: job(), [
            lambda: self.each(lambda node_id: self._supervisor(node_id, "GET", "/status", retries=20), self.pods),
            find_netns])
        # the pod's TCP (the scenario's congestion control, a dilated run's minimum RTO) set by its daemon
        # before its node opens a socket: no pod sysctl for a kubelet or Pod Security to refuse
        self.sysctls = tcp_settings.netns_sysctls(self.ctx.plan.tcp_congestion, self.ctx.plan.dilation,
                                                  self._in_experiment_time(machines))
        sysctls = ops.Sysctls(values=self.sysctls)
        self.namespaces.run_all({pod: [sysctls, ops.RedirectIngress("eth0", IFB)] for pod in self.pods.values()},
                                self.check_stop)
        self._say(f"  their supervisors answering, namespaces found and TCP set in {time.monotonic() - began:.1f}s")

    def _in_experiment_time(self, machines: list[str]) -> bool:
        """A dilated run's cubic in experiment time (peerlab_cubic, docs/dilation.md#tcp) where its
        cluster nodes run on this machine's kernel (the local cluster's do), which registers it for them."""
        if not tcp_settings.wants_experiment_time(self.ctx.plan):
            return False
        here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        try:
            boots = self.cluster.boot_ids(machines)
        except Exception as err:  # noqa: BLE001 - an account that may not read nodes (a Job's, say)
            self._say(f"  tcp: the kernel's cubic (the cluster nodes' kernels could not be told: {str(err)[:200]}; "
                      "docs/dilation.md#tcp)")
            return False
        elsewhere = sorted(m for m, boot in boots.items() if boot != here)
        if elsewhere:
            self._say(f"  tcp: the kernel's cubic ({', '.join(elsewhere)} run another machine's kernel, where peerlab "
                      "cannot register peerlab_cubic; docs/dilation.md#tcp)")
            return False
        return tcp_settings.claim_in_experiment_time(self.ctx.plan, self.ctx.short)

    @staticmethod
    def _say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def _machine(self, pod: str) -> str:
        return self.cluster_nodes[self.node_of_pod[pod]]

    def probe_netem(self) -> tuple[bool, str]:
        first = next(iter(self.pods.values()))
        result = self.namespaces.run(first, [ops.Probe(kind="netem")])[0]
        return result["ok"], f"{result['why']} on the cluster node of pod {first}"

    def probe_delayline(self) -> tuple[bool, str]:
        first_node, first = next(iter(self.pods.items()))
        done = self.cluster.shaper_exec(self.cluster_nodes[first_node], [
            "nsenter", f"--net={self.netns[first]}", "python3", "-m", "orchestrator.shaping.delayline", "--probe"])
        return done.code == 0, f"{done.stdout.strip() or done.stderr.strip() or f'exit code {done.code}'} (in pod {first})"

    def link_counters(self) -> dict[str, dict[str, int]]:
        """Every pod's eth0 counters, read by its shaper agent (all pods side by side); a pod that does
        not answer is left out of this sample."""
        def read(node_id: str) -> tuple[str, dict[str, int] | None]:
            try:
                (done,) = self.namespaces.run(self.pods[node_id], [ops.Counters("eth0")])
            except RuntimeError:
                return node_id, None
            return node_id, {ours: done[theirs] for ours, theirs in COUNTERS.items()}
        return {node_id: c for node_id, c in self.each(read, list(self.ips)) if c is not None}

    # nodes, through each pod's supervisor ------------------------------------------------------
    def _supervisor(self, node_id: str, method: str, path: str, body: dict[str, Any] | None = None,
                    timeout: float = 30, retries: int = 0) -> dict[str, Any]:
        """One request to the pod's supervisor (node/supervisor.py) through the API server's pod proxy."""
        pod = self.pods[node_id]
        for attempt in range(retries + 1):
            try:
                code, raw = self.cluster.pod_http(pod, SUPERVISOR_PORT, method, path, self.ctx.token, body, timeout)
                answer = _answer(code, raw)
            except RuntimeError as err:
                answer = {"error": str(err)}
            if "error" not in answer:
                self._status[node_id] = (time.monotonic(), answer)
                return answer
            if attempt < retries:
                time.sleep(0.5)
        raise RuntimeError(f"node supervisor in pod {pod}: {answer['error']}")

    def start_node(self, node_id: str, config: ContractConfig) -> None:
        """Through the pod's supervisor, which runs peerlab's node or the adapter's command of its group."""
        self._check_pod(node_id)
        self._supervisor(node_id, "POST", "/start", config.model_dump(mode="json"))

    def stop_node(self, node_id: str) -> None:
        self._supervisor(node_id, "POST", "/stop")

    def _check_pod(self, node_id: str) -> None:
        """A pod replaced behind our back (evicted, deleted) has another address and no tc tree."""
        uid = self.cluster.pod_uid(self.pods[node_id])
        if uid != self.uids[node_id]:
            raise RuntimeError(f"pod {self.pods[node_id]} of {node_id} was deleted or replaced during the run "
                               "(eviction? node pressure?); its address and shaping are gone")

    def kill_node(self, node_id: str) -> None:
        self._supervisor(node_id, "POST", "/kill")

    def wait_node(self, node_id: str, timeout: float) -> int | None:
        status = self._supervisor(node_id, "GET", f"/wait?timeout={timeout}", timeout=timeout + 15)
        return None if status["running"] else (status["exit_code"] or 0)

    def alive(self, node_id: str) -> bool:
        if node_id not in self.ips:
            return False
        at, status = self._status.get(node_id, (0.0, {}))
        if time.monotonic() - at > STATUS_TTL:
            status = self._supervisor(node_id, "GET", "/status")
        return bool(status.get("running"))

    def control(self, node_id: str) -> ControlClient:
        return self.cluster.control_client(self.pods[node_id], CONTROL_PORT, node_id, self.ctx.token)

    def event_log(self, node_id: str) -> Path:
        """After teardown: the copy taken out of the pod."""
        return self.ctx.scratch / "events" / f"{node_id}.jsonl"

    def _events(self, node_id: str, offset: int, timeout: float) -> bytes:
        code, raw = self.cluster.pod_http(self.pods[node_id], SUPERVISOR_PORT, "GET", f"/events?offset={offset}",
                                          self.ctx.token, timeout=timeout)
        if code != 200:
            raise RuntimeError(_answer(code, raw)["error"])
        return raw

    def read_event_log(self, node_id: str, offset: int) -> bytes:
        """During the run, from the pod's supervisor (an adapter's node reports readiness only there)."""
        try:
            return self._events(node_id, offset, 30)
        except RuntimeError:
            return b""

    def output_tail(self, node_id: str, lines: int = 10) -> str:
        return self.cluster.logs(self.pods[node_id], "node", tail=lines).rstrip() or "(no output)"

    def _collect(self, node_id: str) -> None:
        """The node's event log and output, out of its pod (before the pod is deleted)."""
        pod = self.pods[node_id]
        try:
            self.event_log(node_id).write_bytes(self._events(node_id, 0, 300))
        except RuntimeError as err:
            print(f"  {node_id}: its event log could not be read in pod {pod}: {str(err)[-300:]}", file=sys.stderr)
        (self.ctx.scratch / "out" / f"{node_id}.out").write_text(self.cluster.logs(pod, "node"))

    def teardown(self) -> None:
        """Kill the nodes still running, copy every event log out of its pod, uninstall the release."""
        if not self.installed:
            self._close_agents()  # opened beside an install that failed
            return
        def stop_and_collect(node_id: str) -> None:
            try:
                if self.alive(node_id):
                    self.kill_node(node_id)
                self._collect(node_id)
            except Exception as err:  # noqa: BLE001 - the others' logs and the uninstall still matter
                print(f"  {node_id}: could not collect its log ({err})", file=sys.stderr)

        if self.ips:
            self.each(stop_and_collect, self.pods)
        self._close_agents()
        try:
            self.cluster.uninstall(self.release)
        finally:
            tcp_settings.release_host_namespaces(self.ctx.short)  # its pods gone, or going
        self.installed = False

    def _close_agents(self) -> None:
        while self.agents:  # popped one by one: a thread still opening one may add another meanwhile
            self.agents.popitem()[1].close()  # its delay line ends with it
        self.namespaces.close()
