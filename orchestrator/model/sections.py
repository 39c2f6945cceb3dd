"""The sections of a scenario (nodes, topology, network, faults, churn, attackers, calibration,
analysis, output) as pydantic models: fields, units, defaults and the checks within one section.
Topics and workload are in traffic.py; the checks across sections are on `Scenario`
(orchestrator/model/scenario.py); what each fault action takes, on its row in fault_actions.py.
May import: the rest of orchestrator/model, and node's registries (protocols, adapters, behaviours);
never orchestrator/run, sim or fidelity."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union
from urllib.parse import urlparse

from pydantic import BaseModel, Field, create_model, field_validator, model_validator

from node.adapters import IMPLEMENTATIONS, PEERLAB
from node.behaviours import BEHAVIOURS
from node.protocols import PROTOCOLS

from . import data_files, fault_actions
from .given import GIVEN, check_dial
from .latency import LATENCY_MODELS
from .overlays import ALGORITHMS as OVERLAYS
from .strict import Strict
from .units import Bandwidth, Duration, Rate, Size

IMPLEMENTATION_DOC = ("whose code runs the nodes: peerlab (its own core) or a libp2p implementation's adapter "
                      "(" + ", ".join(IMPLEMENTATIONS[1:]) + "; docs/node-contract.md), or interop:NAME for a "
                      "binary of the gossipsub-interop contract: an adapter's (interop:go-libp2p) or one its user "
                      "registered outside the scenario (peerlab contract register NAME BINARY; docs/interop.md). "
                      "Never a path")


def _protocol_spec(name: str, params_cls: type[BaseModel]) -> type[BaseModel]:
    return create_model(f"{name}_protocol", __base__=Strict, name=(Literal[name], ...),
                        params=(params_cls, Field(default_factory=params_cls)),
                        implementation=(str, Field(PEERLAB, description=IMPLEMENTATION_DOC)))


ProtocolSpec = Annotated[Union[tuple(_protocol_spec(n, c.Params) for n, c in PROTOCOLS.items())],
                         Field(discriminator="name")]
LatencySpec = Annotated[Union[tuple(LATENCY_MODELS.values())], Field(discriminator="model")]
ROLES = ("honest",)


class Group(Strict):
    """A named subset of nodes with its own parameters or role."""

    name: str = Field(..., pattern=r"^[a-z][a-z0-9-]{0,30}$")
    count: int = Field(..., gt=0)
    role: str = "honest"
    params: dict[str, Any] = Field(default_factory=dict, description="protocol parameters overriding protocol.params")
    implementation: str | None = Field(None, description="overrides protocol.implementation for this group "
                                       "(a mixed network: implementations of one wire interoperate)")
    bandwidth_up: Bandwidth | None = Field(None, gt=0)
    bandwidth_down: Bandwidth | None = Field(None, gt=0)

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
        return role


class Nodes(Strict):
    count: int = Field(..., gt=0, le=5000)
    groups: list[Group] = Field(default_factory=list)
    exits: Literal["fail", "allow"] = Field(
        "fail", description="a node the fault timeline did not stop that exits before the drain's end (a crash, "
                            "a program whose script ended): fail the run (`peerlab run` exits 1), or allow it for "
                            "an experiment that expects it; either way it is printed, recorded in the manifest "
                            "(node_exits), reported and makes the fidelity verdict unfaithful")

    @model_validator(mode="after")
    def _groups_fit(self) -> "Nodes":
        total = sum(g.count for g in self.groups)
        if total > self.count:
            raise ValueError(f"groups hold {total} nodes but nodes.count is {self.count}")
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names) or "default" in names:
            raise ValueError("group names must be unique and not 'default'")
        return self


class Topology(Strict):
    algorithm: str | None = Field(None, description="an overlay algorithm: " + ", ".join(OVERLAYS) +
                                  "; or given (the links listed in `dial`); unset: the protocol's own (topiary "
                                  "and the baselines), else complete")
    degree: int = Field(8, gt=0, description="random, degree-split, topiary: outgoing connections per node (d); random-at-least: links per node, at least (gossipsub-interop's mesh)")
    groups: int | Literal["topic"] = Field("topic", description="scribe: `topic` (a tree per topic) or a "
                                                              "number of random groups (a tree in each)")
    edges_of: str | None = Field(None, description="random only: as many edges as this algorithm gives "
                                                   "on the same subscriptions (for like-for-like comparisons)")
    dial: dict[int, list[int]] | None = Field(None, description="algorithm given: node index -> the node indexes it "
                                              "dials (an imported experiment's connects), e.g. {0: [3, 7], 1: [3]}")

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, name: str | None) -> str | None:
        if name is not None and name not in OVERLAYS and name != GIVEN:
            raise ValueError(f"unknown overlay algorithm {name!r}; known: {', '.join(OVERLAYS)}, {GIVEN}")
        return name

    @field_validator("edges_of")
    @classmethod
    def _known_edges_of(cls, name: str | None) -> str | None:
        if name is not None and name not in OVERLAYS:
            raise ValueError(f"unknown overlay algorithm {name!r}; known: {', '.join(OVERLAYS)}")
        return name

    @field_validator("dial")
    @classmethod
    def _dial(cls, dial: dict[int, list[int]] | None) -> dict[int, list[int]] | None:
        return None if dial is None else check_dial(dial)

    @model_validator(mode="after")
    def _edges_of_random(self) -> "Topology":
        if self.edges_of is not None and self.algorithm != "random":
            raise ValueError("edges_of applies to algorithm: random only")
        if (self.dial is not None) != (self.algorithm == GIVEN):
            raise ValueError("dial goes with algorithm: given, and algorithm: given needs dial")
        return self


class Network(Strict):
    latency: LatencySpec = Field(default_factory=lambda: LATENCY_MODELS["constant"](model="constant", one_way=0.05))
    jitter: Duration = Field(0.0, ge=0)
    loss: float = Field(0.0, ge=0, lt=1, description="packet loss probability (0..1)")
    bandwidth_up: Bandwidth = Field(50_000_000, gt=0)
    bandwidth_down: Bandwidth = Field(50_000_000, gt=0)
    latency_bucket: Duration = Field(0.001, gt=0, description="latencies are rounded to this to share tc classes")
    shaping: Literal["auto", "netem", "delayline", "transport"] = Field(
        "auto", description="where latency is applied (docs/shaping.md): netem (the kernel's qdisc), delayline "
                            "(NFQUEUE: packets held outside every node, for any implementation) or transport "
                            "(peerlab's node delays its own sends); auto: netem if the kernel has it, else the "
                            "delay line for every node (transport only when asked for). `peerlab run --shaping` "
                            "overrides it")
    tcp_congestion: Literal["cubic", "reno", "bbr", "host"] = Field(
        "cubic", description="the TCP congestion control of every node's network namespace (docs/shaping.md#tcp): "
                             "cubic (Linux's default, and what the simulator models: slow start from 10 segments, "
                             "the window restarting after an idle RTO; in a dilated run on this machine's kernel, "
                             "peerlab_cubic, cubic with its clocks in experiment time: docs/dilation.md#tcp), reno, bbr (if the kernel has it), or host "
                             "(whatever the machine's default is; machines differ: this one's is bbr). Every backend: "
                             "on kubernetes the shaping daemon sets it in each pod")


class _Fault(Strict):
    """One entry of the fault timeline (every backend executes it at `at` seconds after T0)."""

    at: Duration = Field(..., ge=0, description="seconds after T0")
    action: Literal[fault_actions.NAMES] = Field(  # type: ignore[valid-type]
        ..., description=fault_actions.action_doc())
    nodes: list[str] | None = Field(None, description="node ids, e.g. [n3, n7]")
    sample: int | None = Field(None, gt=0, description="or: this many nodes picked by the planner")
    restart_after: Duration | None = Field(None, gt=0, description=fault_actions.after_doc("restart_after"))
    groups: list[list[str]] | None = Field(None, description=fault_actions.key_doc(
        "groups", "the sides, as lists of node ids (nodes not listed form one more side)"))
    split: float | None = Field(None, gt=0, lt=1, description=fault_actions.key_doc(
        "split", "or cut off this fraction of the nodes (picked by the planner) from the rest"))
    duration: Duration | None = Field(None, gt=0, description=fault_actions.after_doc("duration"))

    @model_validator(mode="after")
    def _keys(self) -> "_Fault":
        """Each action's keys, as its row in orchestrator/model/fault_actions.py says."""
        given = [k for g in fault_actions.GROUPS for k in g.keys if getattr(self, k) is not None]
        wrong = fault_actions.complaint(self.action, given)
        if wrong:
            raise ValueError(wrong)
        return self


# the quantities an action carries (a degrade's delay, loss, bandwidth): from the table, after the keys above
Fault = create_model("Fault", __base__=_Fault, __doc__=_Fault.__doc__, __module__=__name__, **{
    q.key: (q.type | None, Field(None, gt=0, lt=q.below, description=fault_actions.key_doc(q.key, q.doc)))
    for q in fault_actions.QUANTITIES})
if missing := {k for g in fault_actions.GROUPS for k in g.keys} - set(Fault.model_fields):
    raise TypeError(f"orchestrator/model/fault_actions.py names keys Fault does not have: {sorted(missing)}")


class Lifetime(Strict):
    """A distribution of durations with the given mean (session lengths, downtimes)."""

    distribution: Literal["exponential", "pareto", "weibull"] = "exponential"
    mean: Duration = Field(..., gt=0)
    shape: float | None = Field(None, gt=0, description="pareto (alpha, > 1 for a finite mean; default 2) "
                                                        "and weibull (k; default 0.5): the shape")

    @model_validator(mode="after")
    def _shape(self) -> "Lifetime":
        if self.distribution == "exponential" and self.shape is not None:
            raise ValueError("exponential has no shape; leave shape out")
        if self.distribution == "pareto" and self.shape is not None and self.shape <= 1:
            raise ValueError(f"pareto shape {self.shape} gives an infinite mean; use a shape above 1")
        return self


class Churn(Strict):
    """Nodes leaving and coming back during the run: a session model or a trace file."""

    fraction: float | None = Field(None, gt=0, le=1, description="session model: share of the nodes that "
                                                                 "cycle (sampled by the planner)")
    session: Lifetime | None = Field(None, description="session model: how long a node stays up")
    downtime: Lifetime | None = Field(None, description="session model: how long it stays away "
                                                        "(default: exponential, the session's mean)")
    trace: str | None = Field(None, description="or: a CSV file of `seconds_after_T0,node,up|down` lines "
                                                "(a path relative to the scenario file, as network.latency.path)")
    departure: Literal["kill", "stop"] = Field("kill", description="how a node leaves: SIGKILL or graceful")
    rejoin: Literal["same", "new"] = Field(
        "same", description="same: it comes back with its identity (restart); new: a fresh node from the "
                            "reserve joins instead")
    reserve: int = Field(0, ge=0, description="rejoin new: nodes (counted in nodes.count) that stay away "
                                              "until they join as new identities")
    start: Duration = Field(0.0, ge=0, description="session model: first departures after T0 + start")
    until: Duration | None = Field(None, gt=0, description="session model: no departures after this "
                                                           "(default: the end of the publishing window)")

    _confined_trace = field_validator("trace")(data_files.resolve_field)

    @model_validator(mode="after")
    def _one_model(self) -> "Churn":
        model = self.fraction is not None or self.session is not None
        if model == (self.trace is not None):
            raise ValueError("churn: give either fraction and session (a session model) or trace (a file)")
        if model and (self.fraction is None or self.session is None):
            raise ValueError("churn: the session model needs both fraction and session")
        if self.trace is not None and (self.downtime or self.rejoin != "same" or self.reserve):
            raise ValueError("churn.trace says who leaves and joins; downtime, rejoin and reserve do not apply")
        if (self.rejoin == "new") != (self.reserve > 0):
            raise ValueError("churn: rejoin new needs a reserve of nodes to join (churn.reserve), and a "
                             "reserve is only used with rejoin new")
        return self


class Attackers(Strict):
    """Nodes that run the scenario's protocol wrapped in an attack behaviour (node/behaviours.py)."""

    behaviour: Literal[BEHAVIOURS]  # type: ignore[valid-type]
    count: int = Field(..., gt=0, description="how many nodes (sampled by the planner, never publishers)")
    topic: str | None = Field(None, description="topic-drop: the victim topic (e.g. t3); the attackers "
                                                "subscribe to it and never forward it")
    delay: Duration = Field(0.2, gt=0, description="slow: processing delay added before every forward")
    court: int = Field(4, ge=0, description="eclipse: honest nodes each attacker connects to")
    rate: Rate = Field(10.0, gt=0, le=10_000, description="malformed, *-spam: frames per second to each peer; "
                                                          "publish-flood: messages per second")
    ids: int = Field(500, gt=0, le=100_000, description="ihave-spam, iwant-spam: message ids per frame")
    size: Size = Field(1024, gt=0, le=4 * 1024 * 1024, description="publish-flood: message size")

    @model_validator(mode="after")
    def _topic_for_topic_drop(self) -> "Attackers":
        if (self.behaviour == "topic-drop") != (self.topic is not None):
            raise ValueError("topic is required for topic-drop and only used there")
        return self


class Calibration(Strict):
    enabled: bool = True
    pairs: int = Field(8, ge=0, description="node pairs whose RTT is measured")
    throughput_nodes: int = Field(2, ge=0, description="nodes whose upload throughput is measured")
    probe_bytes: Size = Field(4 * 1024 * 1024, gt=0)
    throughput_rounds: int = Field(3, ge=1, description="probes per measured node, one after another; the "
                                                         "fastest counts (a busy host only slows a probe "
                                                         "down, the shaper is what caps it)")
    tolerance: float = Field(0.10, gt=0, description="warn above this relative error")


class Analysis(Strict):
    measure_from: Duration = Field(
        0.0, ge=0, description="messages published earlier than this after T0 are left out of delivery, "
                               "latency and coverage (e.g. a learning phase; bandwidth counts them)")
    epoch_window: Duration | None = Field(
        None, gt=0, description="width of the per-epoch curves of overlay protocols; unset: topiary's "
                                "epoch length, else 10s")
    dissemination_window: Duration = Field(
        5.0, gt=0, description="delivery_ratio_up counts a receiver only if it was up from a message's "
                               "publication to this long after (churn, kills: see docs/faults.md)")
    warmup_messages: int | None = Field(
        None, ge=0, description="first published messages left out of the protocol's latency figures "
                                "(bandwidth counts them); unset: the protocol's default (gossipsub: 2, as its seed)")


class Output(Strict):
    store: str = Field("file://./runs", description="where runs are kept: file://DIR or s3://BUCKET/PREFIX "
                                                     "(endpoint and credentials from AWS_* variables)")
    resources_interval: Duration = Field(1.0, ge=0, description="seconds between each node's CPU and RSS "
                                                                 "samples in its event log (0: none)")

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, url: str) -> str:
        refuse_credentials(url)
        parsed = urlparse(url)
        if parsed.scheme not in ("file", "s3"):
            raise ValueError(f"store {url!r}: write file://DIR (e.g. file://./runs) or s3://BUCKET/PREFIX")
        if parsed.scheme == "s3" and not parsed.netloc:
            raise ValueError(f"store {url!r}: an s3:// store needs a bucket, e.g. s3://my-bucket/runs")
        if parsed.scheme == "file":
            data_files.check_output_dir((parsed.netloc or "") + parsed.path)  # as open_store reads it
        return url


def refuse_credentials(url: str) -> None:
    """ValueError, without the URL, when a store URL holds credentials (`s3://KEY:SECRET@bucket`): they
    would be printed and recorded in the manifest with it."""
    if "@" in urlparse(url).netloc:
        raise ValueError("a store URL holds no credentials (they would be printed and recorded in the run's "
                         "manifest): give them as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or in "
                         "the store's credentials file ~/.aws/credentials (on Kubernetes, the chart's store Secret), "
                         "and write the URL as s3://BUCKET/PREFIX")
