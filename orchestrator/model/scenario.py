"""The scenario: YAML -> validated pydantic model, with units, defaults and `--set` overrides.

Errors come out as `ScenarioError` whose lines each name a dotted field path, so the CLI can print
them and exit 2 without a traceback; the file is read and parsed within the bounds of bounded.py, and
a refusal's lines are made safe to print there too (few, short, no control characters).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from node.adapters import PEERLAB, get_adapter
from node.behaviours import CONTROL
from node.protocols import PROTOCOLS

from . import bounded, dilation, limits
from .data_files import DataAccess
from .given import GivenSubscriptions
from .sections import (
    Analysis,
    Attackers,
    Calibration,
    Churn,
    Fault,
    Network,
    Nodes,
    Output,
    ProtocolSpec,
    Topology,
)
from .strict import Strict
from .traffic import Topics, Workload


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
    dilation: float = dilation.field()
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
        topic_names = self.topics.topic_names()
        for i, attack in enumerate(self.attackers):
            if attack.topic is not None and attack.topic not in topic_names:
                raise ValueError(f"attackers[{i}].topic: {attack.topic!r} is not a topic ({topic_names[0]}.."
                                 f"{topic_names[-1]})")
        self._given_fit(n, topic_names)
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
        self._implementations_fit()
        limits.check(self)
        refused = dilation.refusal(self.dilation, self.implementations())
        if refused:
            raise ValueError(refused)
        return self

    def _given_fit(self, n: int, topic_names: list[str]) -> None:
        """What is given as lists (orchestrator/model/given.py) names nodes and topics that exist."""
        named: list[tuple[str, int]] = [(f"topology.dial.{a}", i) for a, peers in (self.topology.dial or {}).items()
                                        for i in [a, *peers]]
        subs = self.topics.subscriptions
        if isinstance(subs, GivenSubscriptions):
            named += subs.indexes()
        named += [(f"workload.schedule[{k}].node", p.node) for k, p in enumerate(self.workload.schedule or [])]
        for where, i in named:
            if not 0 <= i < n:
                raise ValueError(f"{where}: node {i} does not exist (nodes.count is {n}: indexes 0..{n - 1})")
        known = set(topic_names)
        for k, p in enumerate(self.workload.schedule or []):
            if p.topic not in known:
                raise ValueError(f"workload.schedule[{k}].topic: {p.topic!r} is not a topic (topics.names, or "
                                 f"t0..t{len(topic_names) - 1})")

    def implementations(self) -> dict[str, str]:
        """Where each implementation is chosen (a field path) -> which one."""
        chosen = {"protocol.implementation": self.protocol.implementation}
        for i, group in enumerate(self.nodes.groups):
            if group.implementation is not None:
                chosen[f"nodes.groups[{i}].implementation"] = group.implementation
        if sum(g.count for g in self.nodes.groups if g.implementation is not None) == self.nodes.count:
            del chosen["protocol.implementation"]  # every node is in a group that chose its own
        return chosen

    def _validation_work_cpu(self, implementation: str) -> bool:
        """Whether nodes of `implementation` are asked to spend their validation as CPU work
        (protocol.params reach every node, a group's params its own nodes)."""
        found = [getattr(getattr(self.protocol.params, "validation", None), "work", None)]
        found += [(g.params.get("validation") or {}).get("work") for g in self.nodes.groups
                  if (g.implementation or self.protocol.implementation) == implementation
                  and isinstance(g.params, dict)]
        return "cpu" in found

    def _implementations_fit(self) -> None:
        """Known implementations, of the protocol, taking the parameters set, on one wire, no attackers."""
        wires = {}
        for where, name in self.implementations().items():
            if name == PEERLAB:
                wires[where] = PEERLAB
                if self._validation_work_cpu(name):
                    raise ValueError(f"protocol.params.validation.work: cpu is spent by the go-libp2p and "
                                     f"rust-libp2p adapters; peerlab's own nodes ({where}) and the simulator wait "
                                     "the delay: set work sleep, or run the adapters")
                continue
            try:
                adapter = get_adapter(name)
            except KeyError as err:
                raise ValueError(f"{where}: {err.args[0]}") from None
            if self.protocol.name not in adapter.protocols:
                raise ValueError(f"{where}: {name} runs {', '.join(adapter.protocols)}, not {self.protocol.name}")
            wires[where] = adapter.wire
            taken = set(adapter.params)
            group_params = {f"nodes.groups[{i}].params": g.params for i, g in enumerate(self.nodes.groups)
                            if (g.implementation or self.protocol.implementation) == name}
            protocol_params = {p: getattr(self.protocol.params, p) for p in self.protocol.params.model_fields_set}
            for path, values in {"protocol.params": protocol_params, **group_params}.items():
                for param in sorted(set(values) - taken):
                    if param in adapter.fixed and values[param] == adapter.fixed[param]:
                        continue
                    if param in adapter.fixed:
                        fixed = json.dumps(adapter.fixed[param])
                        raise ValueError(f"{path}.{param}: {name} cannot change {param}, it always behaves as "
                                         f"{param}: {fixed}; set {fixed}, leave it out, or use implementation: peerlab")
                    raise ValueError(f"{path}.{param}: {name} does not take {param} (it takes: "
                                     f"{', '.join(adapter.params)}); leave it out or use implementation: peerlab")
            if self.attackers:
                raise ValueError(f"attackers: attack behaviours are peerlab's own nodes' ({where} is {name}); "
                                 "run attacks with implementation: peerlab")
        if len(set(wires.values())) > 1:
            raise ValueError("implementations of different wires cannot share a run (peerlab's nodes do not speak "
                             "libp2p): " + ", ".join(f"{w}: {self.implementations()[w]}" for w in wires))


# loading ---------------------------------------------------------------------------------------

class ScenarioError(Exception):
    """A scenario that cannot be used; `problems` are lines of the form `field.path: what is wrong`."""

    def __init__(self, source: str, problems: list[str]):
        self.source = bounded.shown(bounded.mask_credentials(str(source)[:400]), 200)
        self.problems = bounded.refusal_lines(list(problems))
        super().__init__(f"{self.source}: " + "; ".join(self.problems))

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
            parts.append(("." if parts else "") + bounded.shown(item, 40))
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
        if isinstance(got, str) and len(got) > bounded.MESSAGE_VALUE_WIDTH:  # a check's message may repeat it
            msg = msg.replace(got, bounded.shown(got, bounded.MESSAGE_VALUE_WIDTH))
        tail = f" (got {_quoted(got)})" if e["type"] not in ("missing", "extra_forbidden", "model_type") \
            and isinstance(got, (str, int, float)) and not isinstance(got, bool) else ""
        # cross-field checks name their fields in the message already
        out.append(f"{_format_loc(e['loc'])}: {msg}{tail}" if e["loc"] else msg)
    return out


def _quoted(value: Any) -> str:
    return f"'{bounded.shown(value)}'" if isinstance(value, str) else bounded.shown(repr(value))


def canonical_path(path: str) -> str:
    """Expand the shorthands `<protocol>.X` (as in --set gossipsub.variant=v1.2, for any registered
    protocol) to protocol.params.X, and `implementation` to protocol.implementation."""
    if path == "implementation":
        return "protocol.implementation"
    head, _, rest = path.partition(".")
    return f"protocol.params.{rest}" if rest and head in PROTOCOLS else path


def yaml_value(raw: str, path: str, option: str) -> Any:
    """A command-line value read as a YAML scalar (`10`, `true`, `50ms`); a ScenarioError naming the
    option and the path when it is not YAML."""
    try:
        return bounded.load_yaml(raw)
    except bounded.YamlRefused as err:
        raise ScenarioError(option, [f"{path}: its value {_quoted(raw)}: {err}"]) from None
    except yaml.YAMLError as err:
        problem = str(getattr(err, "problem", "") or "not YAML").strip()
        raise ScenarioError(option, [f"{path}: its value {_quoted(raw)} is not a YAML value ({problem}); "
                                     "quote it to pass it as text"]) from None


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `dotted.path=value` strings; values are read as YAML scalars (`10`, `true`, `50ms`)."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        path = canonical_path(path)
        if not sep or not path:
            raise ScenarioError("--set", [f"{_quoted(item)}: write it as dotted.path=value"])
        if path.count(".") >= bounded.MAX_DEPTH:
            raise ScenarioError("--set", [f"{bounded.shown(path)}: a path of {path.count('.') + 1} parts; at most "
                                          f"{bounded.MAX_DEPTH}"])
        value = yaml_value(raw, path, "--set") if raw else ""
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


def parse_scenario(text: str | bytes, source: str = "<scenario>", overrides: list[str] = (),
                   data_roots: list[str | Path] = ()) -> Scenario:
    """`source`: the scenario file's path when there is one (its data paths resolve against its
    directory); `data_roots`: directories outside it whose data files it may read (--data-root)."""
    return validate_data(read_data(text, source), source, overrides, DataAccess.for_scenario(source, data_roots))


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
        data = bounded.load_yaml(text)
    except bounded.YamlRefused as err:
        raise ScenarioError(source, [str(err)]) from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f"line {where.line + 1}, column {where.column + 1}: " if where else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScenarioError(source, [f"(yaml): {at}{problem}"]) from None
    if data is None:
        raise ScenarioError(source, ["(file): empty; a scenario needs at least name and nodes.count"])
    if not isinstance(data, dict):
        raise ScenarioError(source, [f"(top level): expected a mapping of sections, got {type(data).__name__}"])
    if data and not any(isinstance(k, str) and k in Scenario.model_fields for k in data):
        raise ScenarioError(source, [f"(file): not a scenario: none of its {len(data)} top-level keys is a "
                                     "section of one (name, nodes, protocol, ...; `peerlab schema` lists them)"])
    return data


def validate_data(data: dict[str, Any], source: str = "<scenario>", overrides: list[str] = (),
                  access: DataAccess | None = None) -> Scenario:
    data = apply_overrides(data, list(overrides))
    try:
        return Scenario.model_validate(data, context={"data": access or DataAccess.for_scenario(source)})
    except ValidationError as err:
        raise ScenarioError(source, _format_errors(err)) from None


def load_scenario(path: str | Path, overrides: list[str] = (), data_roots: list[str | Path] = ()) -> Scenario:
    return parse_scenario(read_file(path), str(path), overrides, data_roots)


def read_file(path: str | Path) -> bytes:
    """The scenario file's bytes: a regular file of at most bounded.MAX_SCENARIO_BYTES."""
    try:
        return bounded.read_regular(path, bounded.MAX_SCENARIO_BYTES)
    except OSError as err:
        raise ScenarioError(str(path), [f"(file): cannot read: {err.strerror}"]) from None
    except ValueError as err:
        raise ScenarioError(str(path), [f"(file): {err}; a scenario is a YAML file of at most "
                                        f"{bounded.MAX_SCENARIO_BYTES // 2**20} MiB"]) from None


def json_schema() -> dict[str, Any]:
    """JSON Schema of the scenario format, for editors (YAML language servers)."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "peerlab scenario"
    return schema
