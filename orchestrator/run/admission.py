"""Admission: before anything is planned or created, what a run needs on this machine (memory, CPU,
file descriptors, disk for its event logs) against what the machine has. A run that does not fit is
refused with the figures and the largest node count that fits; `--force` runs it anyway and the
manifest records the estimate and that it was forced. Every run's manifest also records its measured
peak (orchestrator/run/memory_watch.py) beside the estimate.

Memory comes from admission_costs.json, measured by `peerlab bench admission` on each backend: the
run's fixed cost, each kind of node's (peerlab's node per protocol, each libp2p implementation),
and how many seconds of what is published a node holds (message size times rate). CPU is each
run's fixed share (orchestrator, watches, delay line at rest), each kind's share per node (idle,
plus its share per message per second of the messages it handles), and what moving the run's bytes
costs the machine: the bytes published per second, times the nodes that handle them, times the copies
of each a node sends, at the CPU per MiB sent (nodes, kernel, delay line and shaper together;
measured on peerlab's GossipSub and applied to every kind), all measured by the same bench from the
host's busy time. A run needing more cores than the machine has is refused; one needing more than
FAITHFUL_CPU_SHARE of them is admitted with a warning that its timing will likely be unfaithful. On
the kubernetes backend the pods' requests are checked against the namespace's quotas and the
cluster's allocatable instead (kube_admission.py); the sim backend's one process is not checked.

A node handles the messages of the topics it subscribes to (`interest`): the bench measured every
node on one topic, so a scenario whose nodes each follow a few of many topics costs that share of
it (pulsarcast-everyone: 3 of 23 zipf topics, estimated at 1.57 cores as if every node handled every
message, kept 0.7 cores busy undilated and was faithful; docs/results.md).

Beside adapter nodes, which have no probes of their own, the orchestrator runs probe processes in
their namespaces (orchestrator/fidelity/netprobe.py), a term of their own since how many are alive
depends on the run, not on the node: before the nodes start, a clock reader in every namespace and
calibration's servers; from T0, a probe server at each node the fidelity probes have reached, kept
to the run's end (PAIRS pairs every INTERVAL_S real seconds, so a long run has one beside almost
every node). Each costs `probe_mib`, measured by the bench apart from the nodes.
"""
from __future__ import annotations

import json
import math
import os
import random
import resource
import shutil
import tempfile
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from node.adapters import INTEROP, PEERLAB
from node.protocols import PROTOCOLS
from orchestrator.fidelity import probes as fidelity_probes
from orchestrator.model import dilation as dilation_rules
from orchestrator.model.overlays import members_of, zipf_interest
from orchestrator.model.scenario import Scenario
from orchestrator.model.traffic import Interest, RoundRobin, Zipf

MIB = 2**20
COSTS_FILE = Path(__file__).with_name("admission_costs.json")
FAITHFUL_CPU_SHARE = 0.4        # of the cores: the bench's runs above it were unfaithful (docs/development.md)
ORCHESTRATOR_FDS_PER_NODE = 6   # process pipes, control connection, namespace and probe handles
ORCHESTRATOR_FDS = 64
EVENT_BYTES = 160               # a JSON line, uncompressed (119-156 B measured)
EVENTS_PER_NODE_PER_MESSAGE = 90  # every event a node logs per message published (GossipSub, degree 8: 52-86)
INTEREST_SAMPLE = 400           # nodes drawn to estimate a zipf subscription model's topic shares
HEADROOM = 0.8                  # of the available memory, descriptors and disk a run may take
CHECKED_BACKENDS = ("local", "docker")


@cache
def costs() -> dict[str, Any]:
    """The measured table (`peerlab bench admission` writes it)."""
    return json.loads(COSTS_FILE.read_text())


def node_mib(backend: str, kind: str) -> float:
    """One node's memory on `backend`; a peerlab protocol not measured costs the most of those measured."""
    table = costs()["backends"][backend]["node_mib"]
    if kind in table:
        return table[kind]
    peerlab = [v for k, v in table.items() if k.startswith(f"{PEERLAB}/")]
    if kind.startswith(f"{PEERLAB}/") and peerlab:
        return max(peerlab)
    if kind.startswith(INTEROP):  # a binary nobody measured: as the costliest implementation measured
        return max(table.values())
    raise KeyError(f"no measured memory for {kind} nodes on the {backend} backend (peerlab bench admission)")


def node_cores_per_msg(backend: str, kind: str) -> float:
    """One node's share of a core per message per second published (0 where not measured: a
    content-based protocol's idle figure holds its own scenario's messages)."""
    table = costs()["backends"][backend].get("node_cores_per_msg") or {}
    if kind in table:
        return table[kind]
    if kind.startswith(INTEROP) and table:
        return max(table.values())
    return 0.0


def node_cores(backend: str, kind: str) -> float:
    """One node's share of a core on `backend` beside the traffic term (its timers, its runtime); a
    peerlab protocol not measured, or a gossipsub-interop binary: the costliest of its kind measured."""
    table = costs()["backends"][backend].get("node_cores")
    if table is None:  # (a table from before CPU was measured: only while the bench measures its first)
        return 0.0
    if kind in table:
        return table[kind]
    if kind.startswith(f"{PEERLAB}/"):
        return max(v for k, v in table.items() if k.startswith(f"{PEERLAB}/"))
    if kind.startswith(INTEROP):
        return max(table.values())
    raise KeyError(f"no measured CPU for {kind} nodes on the {backend} backend (peerlab bench admission)")


class AdmissionError(RuntimeError):
    pass


@dataclass
class Machine:
    memory_mib: float   # MemAvailable
    cpus: int
    fds: int            # this process's soft RLIMIT_NOFILE
    disk_mib: float     # free where the run's scratch lives

    @classmethod
    def here(cls) -> "Machine":
        available = 0.0
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) / 1024
        scratch = Path(tempfile.gettempdir())
        return cls(available, len(os.sched_getaffinity(0)), resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                   shutil.disk_usage(scratch).free / MIB)


@dataclass
class Estimate:
    nodes: int
    memory_mib: float
    cpu_cores: float
    fds: int
    disk_mib: float
    fixed_mib: float = 0.0  # of memory_mib, what does not grow with the nodes
    dilation: float = 1.0   # the run's; cpu_cores is per real second, already divided by it
    fixed_cores: float = 0.0  # of cpu_cores, what does not grow with the nodes
    dilatable: bool = True    # whether its implementations may be dilated (orchestrator/model/dilation.py)
    probes: float = 0.0       # probe processes beside adapter nodes at the run's peak (of memory_mib)

    def dilation_for(self, cores: float) -> float:
        """The smallest --dilate, in steps of dilation's STEP, that brings the work within `cores` (the fixed
        share is not dilated)."""
        if self.fixed_cores >= cores:
            return math.inf  # (the run's own processes, which no k slows, need all of it)
        return dilation_rules.step_up((self.cpu_cores - self.fixed_cores) * self.dilation / (cores - self.fixed_cores))

    def scaled(self, nodes: int) -> "Estimate":
        """The same run with `nodes` nodes of the same mix (everything but the fixed memory scales)."""
        f = nodes / self.nodes
        return Estimate(nodes, self.fixed_mib + (self.memory_mib - self.fixed_mib) * f,
                        self.fixed_cores + (self.cpu_cores - self.fixed_cores) * f,
                        ORCHESTRATOR_FDS + round((self.fds - ORCHESTRATOR_FDS) * f), self.disk_mib * f,
                        self.fixed_mib, self.dilation, self.fixed_cores, self.dilatable, self.probes * f)


def estimate(scenario: Scenario, backend: str = "local") -> Estimate:
    """What the scenario's run needs on `backend`, from its node count and mix, the bytes published per
    second (each node holds some seconds of them), the messages and the duration."""
    mix = _kinds(scenario)
    n = sum(mix.values())
    messages = scenario.workload.messages()
    table = costs()["backends"][backend]
    rate = messages / max(scenario.workload.duration, 1e-9)  # published per second, network-wide
    share = interest(scenario)  # of the stream, what a node handles: its topics'
    handled = rate * share
    held_mib = (table.get("held_s") or 0.0) * rate * scenario.workload.mean_size() / MIB
    nodes_mib = sum((node_mib(backend, k) + held_mib) * c for k, c in mix.items())
    before_t0, after_t0 = probe_processes(scenario, mix)
    probe_mib = table.get("probe_mib") or 0.0
    # the peak: with the nodes up and the probes the fidelity watch started, or before the nodes start
    # with a clock reader in every namespace (where a node costs less than a probe)
    probes = round(max(after_t0, before_t0 - nodes_mib / probe_mib if probe_mib else 0.0), 1)
    return Estimate(
        nodes=n,
        memory_mib=round(table["fixed_mib"] + nodes_mib + probes * probe_mib, 1),
        cpu_cores=table.get("fixed_cores", 0.0) + (sum((node_cores(backend, k) + node_cores_per_msg(backend, k) * handled)
                                                     * c for k, c in mix.items())
                                          + traffic_cores(scenario, n, table, share)) / scenario.dilation,
        fds=ORCHESTRATOR_FDS + ORCHESTRATOR_FDS_PER_NODE * n,
        disk_mib=n * messages * EVENTS_PER_NODE_PER_MESSAGE * EVENT_BYTES / MIB,
        fixed_mib=table["fixed_mib"], dilation=scenario.dilation, fixed_cores=table.get("fixed_cores", 0.0),
        dilatable=dilation_rules.refusal(2.0, scenario.implementations()) is None, probes=probes)


def probe_processes(scenario: Scenario, mix: dict[str, int]) -> tuple[float, float]:
    """How many probe processes a run holds (orchestrator/fidelity/netprobe.py) where it has adapter
    nodes: (before T0: a clock reader per node and calibration's servers; from T0: the servers the
    fidelity probes are expected to have started by the run's end, one at each distinct node a probe
    reached). A run of peerlab's nodes alone has none: its nodes answer the probes themselves."""
    n = sum(mix.values())
    if n == 0 or all(k.startswith(f"{PEERLAB}/") for k in mix):
        return 0.0, 0.0
    cal = scenario.calibration
    before = n + (min(n, cal.pairs + cal.throughput_nodes) if cal.enabled else 0)
    w = scenario.workload
    real_s = (w.warmup + w.duration + w.drain) * scenario.dilation
    draws = fidelity_probes.PAIRS * (real_s / fidelity_probes.INTERVAL_S + 1)
    return float(before), n * (1 - (1 - 1 / n) ** draws)


def traffic_cores(scenario: Scenario, nodes: int, table: dict[str, Any], share: float | None = None) -> float:
    """Cores' worth of moving what the run publishes (experiment time: the caller divides by dilation);
    `share`: the scenario's `interest`, when the caller has it already."""
    per_mib, copies = table.get("cpu_s_per_mib_sent"), table.get("copies_sent")
    if not per_mib or not copies:
        return 0.0
    published = scenario.workload.messages() * scenario.workload.mean_size() / max(scenario.workload.duration, 1e-9)
    return published * nodes * (interest(scenario) if share is None else share) * copies / MIB * per_mib


def interest(scenario: Scenario) -> float:
    """The share of the messages published network-wide that a node handles: the expected fraction of
    the nodes subscribed to a published message's topic. 1.0 with one topic (the bench's runs), for
    content-based matching and for given subscriptions (not estimated: the conservative figure); a
    zipf model's topic shares are drawn for a sample of nodes with a fixed seed (admission does not
    plan). Publishers publishing on their own subscriptions weigh each topic by its subscribers."""
    topics = scenario.topics
    subs, count = topics.subscriptions, topics.count
    if topics.predicates or count <= 1 or PROTOCOLS[scenario.protocol.name].matching != "topic":
        return 1.0
    if isinstance(subs, Interest):
        return subs.rate
    if isinstance(subs, RoundRobin):
        return 1.0 / count
    if not isinstance(subs, Zipf):
        return 1.0
    sample = min(scenario.nodes.count, INTEREST_SAMPLE)
    drawn = zipf_interest(sample, count, subs.alpha, subs.size, random.Random("peerlab:admission:interest"))
    share = [len(m) / sample for m in members_of(drawn, count)]
    weight = share if scenario.workload.publish_topics == "subscribed" else [1.0 if q else 0.0 for q in share]
    return sum(w * q for w, q in zip(weight, share)) / sum(weight)


def problems(need: Estimate, machine: Machine) -> list[str]:
    out = []
    if need.memory_mib > machine.memory_mib * HEADROOM:
        out.append(f"memory: {_size(need.memory_mib)} needed, {_size(machine.memory_mib)} available "
                   f"(a run may take {HEADROOM:.0%})")
    if need.cpu_cores > machine.cpus:
        faithful = _remedy(need, FAITHFUL_CPU_SHARE * machine.cpus, "; a faithful run needs about --dilate {k}, "
                           "which `peerlab run` chooses itself when no dilation is given (--dilate auto)")
        out.append(f"CPU: {need.cpu_cores:.1f} cores' worth of node work and traffic, {machine.cpus} cores here "
                   f"(timings would measure the queue for the CPU, not the protocol{_remedy(need, machine.cpus)}"
                   f"{faithful if need.dilatable else ''})")
    if need.fds > machine.fds * HEADROOM:
        out.append(f"file descriptors: {need.fds} needed, limit {machine.fds} (ulimit -n)")
    if need.disk_mib > machine.disk_mib * HEADROOM:
        out.append(f"disk: {_size(need.disk_mib)} of event logs, {_size(machine.disk_mib)} free "
                   f"in {tempfile.gettempdir()}")
    return out


def _remedy(need: Estimate, cores: float, dilated: str = "; --dilate K gives each node K times the CPU per second "
                                                          "of the experiment: --dilate {k} or more fits") -> str:
    """How the run would come within `cores`: the --dilate that does it (`dilated`, formatted with k), or
    (implementations that cannot be dilated, or a dilation past the limit) the node count."""
    k = need.dilation_for(cores)
    if need.dilatable and k <= dilation_rules.MAX:
        return dilated.format(k=f"{k:g}")
    nodes = need.nodes
    while nodes > 0 and need.scaled(nodes).cpu_cores > cores:
        nodes -= 1
    why = ("its implementations cannot be dilated" if not need.dilatable
           else f"the run's own processes need {need.fixed_cores:.2f} cores, which no --dilate reduces" if math.isinf(k)
           else f"--dilate {k:g} is past {dilation_rules.MAX:g}")
    return f"; {why}: --set nodes.count={nodes} fits" if nodes else f"; {why}"


def warnings(need: Estimate, machine: Machine) -> list[str]:
    """What fits but will likely make the run's verdict unfaithful."""
    if machine.cpus >= need.cpu_cores > FAITHFUL_CPU_SHARE * machine.cpus:
        return [f"CPU: {need.cpu_cores:.2f} cores' worth of work on {machine.cpus} cores: the bench's runs above "
                f"{FAITHFUL_CPU_SHARE:.0%} of the cores had unfaithful timing (CPU pressure, late event loops)"
                f"{_remedy(need, FAITHFUL_CPU_SHARE * machine.cpus)}"
                f"{' (--dilate auto chooses it and checks the verdict)' if need.dilatable else ''}"]
    return []


def largest_fit(need: Estimate, machine: Machine) -> int:
    lo, hi = 0, need.nodes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if problems(need.scaled(mid), machine):
            hi = mid - 1
        else:
            lo = mid
    return lo


def admit(scenario: Scenario, backend: str, force: bool = False, machine: Machine | None = None) -> dict[str, Any]:
    """The manifest's `admission` record; AdmissionError (figures and the largest node count that
    fits) when the run does not fit this machine and `force` is off."""
    if backend == "kubernetes":
        return _admit_kubernetes(scenario, force)
    if backend not in CHECKED_BACKENDS:
        return {"checked": False, "why": f"the {backend} backend's nodes do not run on this machine's processes"}
    if not COSTS_FILE.exists():  # (only while `peerlab bench admission` measures its first table)
        return {"checked": False, "why": f"{COSTS_FILE.name} is missing: peerlab bench admission writes it"}
    machine = machine or Machine.here()
    need = estimate(scenario, backend)
    found = problems(need, machine)
    record = {"checked": True, "estimate": asdict(need), "machine": asdict(machine), "problems": found,
              "warnings": warnings(need, machine), "forced": bool(found) and force}
    if found and not force:
        fit = largest_fit(need, machine)
        advice = (f"At most {fit} nodes of this scenario fit (--set nodes.count={fit})" if fit
                  else "Not even one node fits beside the orchestrator")
        raise AdmissionError(f"{need.nodes} nodes do not fit this machine:\n  " + "\n  ".join(found)
                             + f"\n{advice}; --force runs it anyway.")
    return record


def _admit_kubernetes(scenario: Scenario, force: bool) -> dict[str, Any]:
    """The pods' requests against the namespace's quotas and the cluster's allocatable
    (orchestrator/backends/kube_admission.py); a cluster that cannot be asked is left to the backend."""
    from orchestrator.backends import kube_admission
    from orchestrator.backends.kube_cluster import settings

    opts = settings()
    try:
        room = kube_admission.cluster_room(opts["namespace"], opts["context"])
    except RuntimeError as err:
        return {"checked": False, "why": f"the cluster could not be asked for its quotas: {err}"}
    n = scenario.nodes.count
    per_pod = kube_admission.pod_needs()
    found, fit = kube_admission.problems(n, per_pod, room)
    record = {"checked": True, "per_pod": per_pod, "quota_left": room.quota_left, "allocatable": room.allocatable,
              "problems": found, "forced": bool(found) and force}
    if found and not force:
        advice = (f"At most {fit} nodes of this scenario fit (--set nodes.count={fit})" if fit
                  else "Not even one node's pod fits")
        raise AdmissionError(f"{n} nodes (one pod each) do not fit namespace {room.namespace}:\n  "
                             + "\n  ".join(found) + f"\n{advice}; --force runs it anyway.")
    return record


def _size(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def _kinds(scenario: Scenario) -> dict[str, int]:
    """How many nodes of each kind: `peerlab/<protocol>` for peerlab's node, else the implementation."""
    total = scenario.nodes.count
    default = scenario.protocol.implementation
    mix: dict[str, int] = {}
    for group in scenario.nodes.groups:
        name = group.implementation or default
        mix[name] = mix.get(name, 0) + group.count
    mix[default] = mix.get(default, 0) + max(0, total - sum(mix.values()))
    return {(f"{PEERLAB}/{scenario.protocol.name}" if k == PEERLAB else k): v for k, v in mix.items() if v}


def kind_of(scenario: Scenario) -> str:
    """The one kind of node the scenario runs (for a mix: the kinds joined by '+')."""
    return "+".join(sorted(_kinds(scenario)))
