"""The scenario: YAML -> validated pydantic model, with units, defaults and `--set` overrides.

Errors come out as `ScenarioError` whose lines each name a dotted field path, so the CLI can print
them and exit 2 without a traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from node import ids
from node.behaviours import BEHAVIOURS, CONTROL
from node.predicates import Predicate, PredicateError
from node.protocols import PROTOCOLS

from .latency import LATENCY_MODELS
from .overlays import ALGORITHMS as OVERLAYS
from .units import Bandwidth, Duration, Rate, Size


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _protocol_spec(name: str, params_cls: type[BaseModel]) -> type[BaseModel]:
    return create_model(f"{name}_protocol", __base__=Strict, name=(Literal[name], ...),
                        params=(params_cls, Field(default_factory=params_cls)))


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
                                  "; unset: the protocol's own (topiary and the baselines), else complete")
    degree: int = Field(8, gt=0, description="random, degree-split, topiary: outgoing connections per node (d)")
    groups: int | Literal["topic"] = Field("topic", description="scribe: `topic` (a tree per topic) or a "
                                                              "number of random groups (a tree in each)")
    edges_of: str | None = Field(None, description="random only: as many edges as this algorithm gives "
                                                   "on the same subscriptions (for like-for-like comparisons)")

    @field_validator("algorithm", "edges_of")
    @classmethod
    def _known_algorithm(cls, name: str | None) -> str | None:
        if name is not None and name not in OVERLAYS:
            raise ValueError(f"unknown overlay algorithm {name!r}; known: {', '.join(OVERLAYS)}")
        return name

    @model_validator(mode="after")
    def _edges_of_random(self) -> "Topology":
        if self.edges_of is not None and self.algorithm != "random":
            raise ValueError("edges_of applies to algorithm: random only")
        return self


class Network(Strict):
    latency: LatencySpec = Field(default_factory=lambda: LATENCY_MODELS["constant"](model="constant", one_way=0.05))
    jitter: Duration = Field(0.0, ge=0)
    loss: float = Field(0.0, ge=0, lt=1, description="packet loss probability (0..1)")
    bandwidth_up: Bandwidth = Field(50_000_000, gt=0)
    bandwidth_down: Bandwidth = Field(50_000_000, gt=0)
    latency_bucket: Duration = Field(0.001, gt=0, description="latencies are rounded to this to share tc classes")


class Interest(Strict):
    model: Literal["interest"]
    rate: float = Field(..., gt=0, le=1, description="probability a node subscribes to each topic")


class Zipf(Strict):
    model: Literal["zipf"]
    alpha: float = Field(..., ge=0)
    size: int = Field(..., gt=0, description="topics per node")


class PredicateGroup(Strict):
    """Content-based protocols: a group of nodes subscribing to one filter (SmartPubSub's workload)."""

    filter: str = Field(..., description="a predicate, e.g. 'surf T/bali T/price R 1000 1500'")
    subscribers: int = Field(..., gt=0, description="how many nodes subscribe to it (sampled by the planner)")
    at: Duration | None = Field(None, ge=0, description="when they subscribe, in seconds after T0 (SmartPubSub's "
                                                        "subburst: when publishing starts); unset: at start. "
                                                        "They are expected to receive what is published from then on")

    @field_validator("filter")
    @classmethod
    def _parses(cls, text: str) -> str:
        try:
            return str(Predicate.parse(text))
        except PredicateError as err:
            raise ValueError(str(err)) from None


class Topics(Strict):
    count: int = Field(1, gt=0, le=100_000)
    subscriptions: Annotated[Union[Interest, Zipf], Field(discriminator="model")] = Field(
        default_factory=lambda: Interest(model="interest", rate=1.0))
    predicates: list[PredicateGroup] | None = Field(
        None, description="content-based protocols (matching by predicate): who subscribes to which filter, instead of "
                          "count and subscriptions; publishers publish workload.events")

    @model_validator(mode="after")
    def _size_fits(self) -> "Topics":
        if isinstance(self.subscriptions, Zipf) and self.subscriptions.size > self.count:
            raise ValueError(f"subscriptions.size ({self.subscriptions.size}) exceeds topics.count ({self.count})")
        return self


class Workload(Strict):
    publishers: int = Field(1, gt=0, description="how many nodes publish (sampled)")
    rate: Rate | None = Field(None, gt=0, description="network-wide messages per second, e.g. 2/s")
    interval: Duration | None = Field(None, gt=0, description="per-publisher interval (instead of rate)")
    arrival: Literal["uniform", "poisson"] = "uniform"
    publish_topics: Literal["any", "subscribed", "owned"] = Field(
        "any", description="publish on any topic with subscribers, only on the publisher's own topics, or "
                           "owned: each topic has one publisher (a channel and its author), dealt round-robin")
    publisher_skew: float = Field(0.0, ge=0, description="Zipf exponent of how often each publisher publishes "
                                                         "(0: all alike; with a network-wide rate)")
    message_size: Size = Field(1024, gt=0)
    warmup: Duration = Field(2.0, ge=0, description="after T0, before the first publish")
    duration: Duration = Field(10.0, gt=0, description="publishing window")
    messages_per_publisher: int | None = Field(
        None, gt=0, description="instead of duration: each publisher publishes this many messages, in "
                                "turn, at `rate` (the gossipsub seed's scenarios: one each)")
    drain: Duration = Field(3.0, ge=0, description="after the last publish, before stopping")
    events: list[str] | None = Field(None, description="content-based protocols: the event predicates "
                                                       "publishers pick from at random, e.g. "
                                                       "'surf T/bali T/price R 1200 1200'")

    @field_validator("events")
    @classmethod
    def _events_parse(cls, events: list[str] | None) -> list[str] | None:
        if events is None:
            return None
        if not events:
            raise ValueError("give at least one event predicate")
        try:
            return [str(Predicate.parse(e)) for e in events]
        except PredicateError as err:
            raise ValueError(str(err)) from None

    @model_validator(mode="after")
    def _one_pace(self) -> "Workload":
        if self.rate is not None and self.interval is not None:
            raise ValueError("give either rate (network-wide) or interval (per publisher), not both")
        if self.rate is None and self.interval is None:
            self.rate = 1.0
        if self.publisher_skew and self.interval is not None:
            raise ValueError("publisher_skew shares a network-wide rate among publishers; give rate, not interval")
        if self.messages_per_publisher is not None:
            if "duration" in self.model_fields_set:
                raise ValueError("give either duration or messages_per_publisher, not both (to run for a "
                                 "duration instead: --set workload.messages_per_publisher=null)")
            if self.rate is None or self.arrival != "uniform":
                raise ValueError("messages_per_publisher needs a network-wide rate and uniform arrivals")
            self.duration = self.messages_per_publisher * self.publishers / self.rate
        return self


NODE_ACTIONS = ("kill", "stop", "restart", "join", "degrade", "restore")
FAULT_ACTIONS = NODE_ACTIONS + ("partition", "heal")


class Fault(Strict):
    """One entry of the fault timeline (every backend executes it at `at` seconds after T0)."""

    at: Duration = Field(..., ge=0, description="seconds after T0")
    action: Literal[FAULT_ACTIONS] = Field(  # type: ignore[valid-type]
        ..., description="kill (SIGKILL), stop (graceful), restart (same identity), join (a node absent "
                         "until now: a new identity), partition, heal, degrade, restore")
    nodes: list[str] | None = Field(None, description="node ids, e.g. [n3, n7]")
    sample: int | None = Field(None, gt=0, description="or: this many nodes picked by the planner")
    restart_after: Duration | None = Field(None, gt=0, description="kill/stop: restart this long after")
    groups: list[list[str]] | None = Field(
        None, description="partition: the sides, as lists of node ids (nodes not listed form one more side)")
    split: float | None = Field(None, gt=0, lt=1, description="partition: or cut off this fraction of the "
                                                              "nodes (picked by the planner) from the rest")
    duration: Duration | None = Field(None, gt=0, description="partition: heal, degrade: restore, this long after")
    delay: Duration | None = Field(None, gt=0, description="degrade: latency added to each of the node's links, "
                                                           "both directions")
    loss: float | None = Field(None, gt=0, lt=1, description="degrade: frame loss on the node's links, both directions")
    bandwidth: Bandwidth | None = Field(None, gt=0, description="degrade: the node's new upload and download rate")

    @model_validator(mode="after")
    def _targets(self) -> "Fault":
        a = self.action
        if a in NODE_ACTIONS and (self.nodes is None) == (self.sample is None):
            raise ValueError(f"{a}: give exactly one of nodes (a list of ids) or sample (a count)")
        if a not in NODE_ACTIONS and (self.nodes is not None or self.sample is not None):
            raise ValueError(f"{a} applies to the whole network: leave nodes and sample out")
        if self.restart_after is not None and a not in ("kill", "stop"):
            raise ValueError("restart_after belongs on kill or stop")
        if a == "partition" and (self.groups is None) == (self.split is None):
            raise ValueError("partition: give exactly one of groups (lists of node ids) or split (a fraction)")
        if a != "partition" and (self.groups is not None or self.split is not None):
            raise ValueError("groups and split belong on partition")
        if self.duration is not None and a not in ("partition", "degrade"):
            raise ValueError("duration belongs on partition (heal after) or degrade (restore after)")
        impair = [k for k in ("delay", "loss", "bandwidth") if getattr(self, k) is not None]
        if a == "degrade" and not impair:
            raise ValueError("degrade: give at least one of delay, loss, bandwidth")
        if a != "degrade" and impair:
            raise ValueError(f"{', '.join(impair)} belong on degrade")
        return self


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
                                                "(a path relative to the working directory, as network.latency.path)")
    departure: Literal["kill", "stop"] = Field("kill", description="how a node leaves: SIGKILL or graceful")
    rejoin: Literal["same", "new"] = Field(
        "same", description="same: it comes back with its identity (restart); new: a fresh node from the "
                            "reserve joins instead")
    reserve: int = Field(0, ge=0, description="rejoin new: nodes (counted in nodes.count) that stay away "
                                              "until they join as new identities")
    start: Duration = Field(0.0, ge=0, description="session model: first departures after T0 + start")
    until: Duration | None = Field(None, gt=0, description="session model: no departures after this "
                                                           "(default: the end of the publishing window)")

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
        parsed = urlparse(url)
        if parsed.scheme not in ("file", "s3"):
            raise ValueError(f"store {url!r}: write file://DIR (e.g. file://./runs) or s3://BUCKET/PREFIX")
        if parsed.scheme == "s3" and not parsed.netloc:
            raise ValueError(f"store {url!r}: an s3:// store needs a bucket, e.g. s3://my-bucket/runs")
        return url


class Scenario(Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    seed: int = 1
    nodes: Nodes
    protocol: ProtocolSpec = Field("floodsub", validate_default=True)
    topology: Topology = Field(default_factory=Topology)
    network: Network = Field(default_factory=Network)
    topics: Topics = Field(default_factory=Topics)
    workload: Workload = Field(default_factory=Workload)
    faults: list[Fault] = Field(default_factory=list)
    churn: Churn | None = None
    attackers: list[Attackers] = Field(default_factory=list)
    calibration: Calibration = Field(default_factory=Calibration)
    analysis: Analysis = Field(default_factory=Analysis)
    output: Output = Field(default_factory=Output)
    matrix: dict[str, list[Any]] = Field(
        default_factory=dict, description="run once per combination: {dotted.path: [values]}, e.g. "
                                          "{gossipsub.variant: [v1.1, v1.2, all-3]}; `peerlab run` expands it")

    @field_validator("protocol", mode="before")
    @classmethod
    def _protocol_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _cross_checks(self) -> "Scenario":
        n = self.nodes.count
        if self.workload.publishers > n:
            raise ValueError(f"workload.publishers ({self.workload.publishers}) exceeds nodes.count ({n})")
        known = {f"n{i}" for i in range(n)}
        for i, fault in enumerate(self.faults):
            listed = list(fault.nodes or []) + [x for g in fault.groups or [] for x in g]
            unknown = [x for x in listed if x not in known]
            if unknown:
                raise ValueError(f"faults[{i}].{'groups' if fault.groups else 'nodes'}: unknown node ids {unknown} "
                                 f"(ids are n0..n{n - 1})")
            if len(set(listed)) != len(listed):
                raise ValueError(f"faults[{i}]: a node is listed twice")
            if fault.sample and fault.sample > n:
                raise ValueError(f"faults[{i}].sample ({fault.sample}) exceeds nodes.count ({n})")
        if self.churn and self.churn.reserve + self.workload.publishers > n:
            raise ValueError(f"churn.reserve ({self.churn.reserve}) leaves fewer nodes present at T0 than "
                             f"workload.publishers ({self.workload.publishers})")
        honest = n - sum(a.count for a in self.attackers)
        if self.workload.publishers > honest:
            raise ValueError(f"attackers: {n - honest} attackers leave {honest} honest nodes, fewer than "
                             f"workload.publishers ({self.workload.publishers})")
        for i, attack in enumerate(self.attackers):
            if attack.topic is not None and not (attack.topic.startswith("t") and attack.topic[1:].isdigit()
                                                 and ids.node_index(attack.topic) < self.topics.count):
                raise ValueError(f"attackers[{i}].topic: {attack.topic!r} is not a topic (t0..t{self.topics.count - 1})")
        core = PROTOCOLS[self.protocol.name]
        content = core.matching == "predicate"
        if content and (self.topics.predicates is None or self.workload.events is None):
            raise ValueError(f"{self.protocol.name} is content-based: give topics.predicates (filters and how many "
                             "subscribe to each) and workload.events (the event predicates published)")
        if not content and (self.topics.predicates is not None or self.workload.events is not None):
            content_based = ", ".join(n for n, c in PROTOCOLS.items() if c.matching == "predicate")
            raise ValueError(f"topics.predicates and workload.events are for content-based protocols ({content_based}); "
                             f"{self.protocol.name} is topic-based: use topics.count and topics.subscriptions")
        if content and self.workload.publish_topics != "any":
            raise ValueError("workload.publish_topics: content-based publishers pick from workload.events; leave it out")
        for i, group in enumerate(self.topics.predicates or []):
            if group.subscribers > n:
                raise ValueError(f"topics.predicates[{i}].subscribers ({group.subscribers}) exceeds nodes.count ({n})")
        for i, attack in enumerate(self.attackers):
            if attack.behaviour in CONTROL and core.wire != "pubsub":
                raise ValueError(f"attackers[{i}].behaviour: {attack.behaviour} speaks the libp2p pubsub control "
                                 f"wire (gossipsub); {self.protocol.name} does not use it")
        if core.topology and self.topology.algorithm not in (None, core.topology):
            raise ValueError(f"topology.algorithm: {self.protocol.name} always starts from {core.topology}; "
                             f"leave topology.algorithm out (or use static-overlay to try "
                             f"{self.topology.algorithm})")
        if "degree" in self.protocol.params.model_fields_set:
            raise ValueError("protocol.params.degree: set topology.degree instead (the d of topiary and of "
                             "every baseline, so a --set protocol=... comparison keeps it)")
        params_cls = core.Params
        for i, group in enumerate(self.nodes.groups):
            try:
                params_cls(**{**self.protocol.params.model_dump(), **group.params})
            except ValidationError as err:
                first = err.errors()[0]
                raise ValueError(f"nodes.groups[{i}].params.{'.'.join(map(str, first['loc']))}: {first['msg']}")
        return self


# loading ---------------------------------------------------------------------------------------

class ScenarioError(Exception):
    """A scenario that cannot be used; `problems` are lines of the form `field.path: what is wrong`."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))

    def __str__(self) -> str:
        lines = [f"{self.source}: invalid scenario"] + [f"  {p}" for p in self.problems]
        return "\n".join(lines)


def _format_loc(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    previous = None
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif previous in _TAGGED or str(item).startswith("function-"):
            pass  # the discriminator tag or validator name pydantic adds to the path
        else:
            parts.append(("." if parts else "") + item)
        previous = item
    return "".join(parts) or "(top level)"


_TAGGED = ("protocol", "latency", "subscriptions")


def _format_errors(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; `peerlab schema` lists the fields)"
        elif e["type"] == "union_tag_not_found":
            msg = f"missing '{e['ctx']['discriminator'].strip(chr(39))}' (which kind? see `peerlab schema`)"
        elif e["type"] == "union_tag_invalid":
            msg = msg.replace("Input tag", "value")
        got = e.get("input")
        tail = f" (got {got!r})" if e["type"] not in ("missing", "extra_forbidden", "model_type") \
            and isinstance(got, (str, int, float)) and not isinstance(got, bool) else ""
        # cross-field checks name their fields in the message already
        out.append(f"{_format_loc(e['loc'])}: {msg}{tail}" if e["loc"] else msg)
    return out


def canonical_path(path: str) -> str:
    """Expand the shorthand `<protocol>.X` (as in --set gossipsub.variant=v1.2, for any registered
    protocol) to protocol.params.X."""
    head, _, rest = path.partition(".")
    return f"protocol.params.{rest}" if rest and head in PROTOCOLS else path


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `dotted.path=value` strings; values are read as YAML scalars (`10`, `true`, `50ms`)."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        path = canonical_path(path)
        if not sep or not path:
            raise ScenarioError("--set", [f"{item!r}: write it as dotted.path=value"])
        value = yaml.safe_load(raw) if raw else ""
        target = data
        keys = path.split(".")
        for key in keys[:-1]:
            nxt = target.get(key)
            if not isinstance(nxt, dict):
                nxt = {"name": nxt} if key == "protocol" and isinstance(nxt, str) else {}
                target[key] = nxt
            target = nxt
        target[keys[-1]] = value
    return data


def parse_scenario(text: str | bytes, source: str = "<scenario>", overrides: list[str] = ()) -> Scenario:
    return validate_data(read_data(text, source), source, overrides)


def read_data(text: str | bytes, source: str = "<scenario>") -> dict[str, Any]:
    """The YAML mapping of a scenario file, or a ScenarioError saying why it is not one."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ScenarioError(source, ["(file): not UTF-8 text; a scenario is a YAML file"]) from None
    if "\x00" in text:
        raise ScenarioError(source, ["(file): contains NUL bytes; a scenario is a YAML file"])
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f"line {where.line + 1}, column {where.column + 1}: " if where else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScenarioError(source, [f"(yaml): {at}{problem}"]) from None
    if data is None:
        raise ScenarioError(source, ["(file): empty; a scenario needs at least name and nodes.count"])
    if not isinstance(data, dict):
        raise ScenarioError(source, [f"(top level): expected a mapping of sections, got {type(data).__name__}"])
    return data


def validate_data(data: dict[str, Any], source: str = "<scenario>", overrides: list[str] = ()) -> Scenario:
    data = apply_overrides(data, list(overrides))
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(source, _format_errors(err)) from None


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    return parse_scenario(read_file(path), str(path), overrides)


def read_file(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ScenarioError(str(path), [f"(file): cannot read: {err.strerror}"]) from None


def json_schema() -> dict[str, Any]:
    """JSON Schema of the scenario format, for editors (YAML language servers)."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "peerlab scenario"
    return schema
