"""The planner: scenario + seed -> RunPlan, data, deterministic, saved in the manifest (its link shapes,
`RunPlan.link_shapes`, are made from it when first asked and saved nowhere).

Everything random about a run (placement, subscriptions, topology, publishers, schedule, sampled
fault targets) is decided here, each aspect from its own seeded stream so that changing one section
of a scenario does not reshuffle the others. Backends only execute a plan.
"""
from __future__ import annotations

import math
import random
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, Field

from node import ids
from node.adapters import PEERLAB
from node.protocols import PROTOCOLS
from node.protocols.content.predicates import expected_topics, group_predicates

from . import overlays
from .given import GIVEN, GivenSubscriptions
from .link_shape import LinkShape, bucketed, link_shapes
from .scenario import Scenario, ScenarioError
from .timeline import FaultEvent, churn_faults, in_order, planned_faults
from .traffic import RoundRobin, Zipf


class NodePlan(BaseModel):
    id: str
    index: int
    group: str
    role: str
    protocol: str
    implementation: str = Field(PEERLAB, description="whose code runs it (node/adapters)")
    params: dict[str, Any] = Field(description="protocol parameters: all of them for peerlab's nodes, the ones "
                                   "the scenario sets for an adapter's (its implementation's defaults stand)")
    bandwidth_up: int
    bandwidth_down: int
    subscriptions: list[str]
    authors: list[str] = Field(default_factory=list, description="topics this node creates at start "
                               "(protocols whose topics have an author: pulsarcast)")
    dial: list[str] = Field(description="peers this node connects to (it is the dialer)")
    neighbours: list[str] = Field(description="all planned peers, dialled or accepted")
    contacts: list[str] = Field(default_factory=list, description="peers it may connect to during the run: "
                                "its neighbours, or every node for protocols that choose their own")
    behaviour: dict[str, Any] = Field(default_factory=dict, description="attackers: the behaviour's settings")
    schedule: list[tuple[float, str, int]] = Field(description="(seconds after T0, topic, size) to publish")
    late_subscriptions: list[tuple[float, str]] = Field(
        default_factory=list, description="(seconds after T0, topic) subscribed during the run; expected "
                                          "to receive what is published from then on")
    absent: bool = Field(False, description="not started with the others: it joins (a new identity) at "
                                            "joins_at, or never (an unused churn reserve node)")
    joins_at: float | None = Field(None, description="seconds after T0 at which an absent node joins")
    placement: dict[str, Any] = Field(default_factory=dict)


class RunPlan(BaseModel):
    scenario: str
    topology: str = ""
    seed: int
    protocol: str
    topics: list[str] = Field(description="topic names; for content-based protocols, the event predicates")
    matching: Literal["topic", "predicate"] = Field(
        "topic", description="who expects a message: its topic's subscribers, or (predicate) the nodes with a "
                             "subscription filter matching it")
    nodes: list[NodePlan]
    latency_ms: list[list[float]] = Field(description="one-way latency per ordered pair, as the model gives it")
    latency_bucket_ms: float
    latency_notes: list[str] = Field(default_factory=list, description="what the latency model had to assume")
    jitter_ms: float
    loss: float
    faults: list[FaultEvent]
    warmup: float
    duration: float
    drain: float
    dilation: float = Field(1.0, description="time dilation k: every time above is experiment time; the run "
                                             "takes k times as long, its network k times faster (docs/dilation.md)")
    tcp_congestion: str = Field("cubic", description="every node namespace's TCP congestion control (network.tcp_congestion)")

    @property
    def end(self) -> float:
        """Seconds after T0 at which nodes are stopped."""
        return self.warmup + self.duration + self.drain

    def node(self, node_id: str) -> NodePlan:
        return self.nodes[ids.node_index(node_id)]

    def one_way_ms(self, a: str, b: str) -> float:
        """The latency shaping applies from a to b: the model's value rounded to the bucket width."""
        return bucketed(self.latency_ms[ids.node_index(a)][ids.node_index(b)], self.latency_bucket_ms)

    def publishes(self) -> int:
        return sum(len(n.schedule) for n in self.nodes)

    @cached_property
    def link_shapes(self) -> dict[str, LinkShape]:
        """Every node's link as the run applies it before any fault (node id -> its shape, in the plan's
        order): dilated by the plan's k and rounded (link_shape.py). Made once, when first asked; not a
        field, so neither plan.json nor the manifest carries it."""
        return link_shapes(self, self.dilation)


def _stream(seed: int, label: str) -> random.Random:
    return random.Random(f"peerlab:{seed}:{label}")


def _subscriptions(sc: Scenario, rng: random.Random, topics: list[str]) -> list[list[str]]:
    subs = sc.topics.subscriptions
    n, count = sc.nodes.count, len(topics)
    if isinstance(subs, RoundRobin):
        return [[topics[i % count]] for i in range(n)]
    if isinstance(subs, Zipf):
        drawn = overlays.zipf_interest(n, count, subs.alpha, subs.size, rng)
    else:
        drawn = overlays.uniform_interest(n, count, subs.rate, rng)
    return [[topics[i] for i in sorted(ts)] for ts in drawn]


def _given_schedule(sc: Scenario) -> dict[int, list[tuple[float, str, int]]]:
    """workload.schedule as each publisher's (seconds after T0, topic, size), in time order."""
    out: dict[int, list[tuple[float, str, int]]] = {}
    for p in sc.workload.schedule or []:
        out.setdefault(p.node, []).append((round(p.at, 6), p.topic, int(p.size)))
    return {node: sorted(entries, key=lambda e: e[0]) for node, entries in sorted(out.items())}


def topology_algorithm(sc: Scenario) -> str:
    """The protocol's own topology (topiary, the baselines), else the scenario's, else complete."""
    return PROTOCOLS[sc.protocol.name].topology or sc.topology.algorithm or "complete"


def _topology(sc: Scenario, rng: random.Random, subs: list[list[str]], topics: list[str]) -> list[list[str]]:
    """Who dials whom: the overlay algorithm on the planned subscriptions; the node that chose an
    edge dials it (random, degree-split), else the lower index."""
    n = sc.nodes.count
    index = {t: i for i, t in enumerate(topics)}
    interests = [{index[t] for t in s if t in index} for s in subs]  # filters are no topics
    topo = sc.topology
    if topo.algorithm == GIVEN:
        return [[f"n{j}" for j in sorted((topo.dial or {}).get(i, []))] for i in range(n)]
    if topo.edges_of:
        target = overlays.build(topo.edges_of, interests, len(topics), rng, topo.degree, topo.groups)
        overlay = overlays.baselines.random_edges(n, len(target.edges), rng)
    else:
        overlay = overlays.build(topology_algorithm(sc), interests, len(topics), rng, topo.degree, topo.groups)
    dial: list[list[int]] = [[] for _ in range(n)]
    for a, b in sorted(overlay.edges):
        who = overlay.dialer.get((a, b), a)
        dial[who].append(b if who == a else a)
    return [[f"n{j}" for j in sorted(d)] for d in dial]


def _attackers(sc: Scenario, rng: random.Random, n: int, spare: set[int] = frozenset()) -> list[dict[str, Any] | None]:
    """Which nodes attack, and with what settings (each block samples from the nodes left, never from
    `spare`)."""
    out: list[dict[str, Any] | None] = [None] * n
    free = [i for i in range(n) if i not in spare]
    for attack in sc.attackers:
        for i in sorted(rng.sample(free, attack.count)):
            out[i] = attack.model_dump(mode="json", exclude_none=True)
            free.remove(i)
    return out


def _attack_edges(sc: Scenario, rng: random.Random, attackers: list[dict[str, Any] | None],
                  dial: list[list[str]]) -> None:
    """Eclipse attackers: fully connected among themselves, and each dials `court` honest nodes."""
    eclipse = [i for i, a in enumerate(attackers) if a and a["behaviour"] == "eclipse"]
    honest = [i for i, a in enumerate(attackers) if a is None]
    for a in eclipse:
        attackers[a]["colluders"] = [f"n{b}" for b in eclipse if b != a]
    linked = {(ids.node_index(p), i) for i, d in enumerate(dial) for p in d}
    linked |= {(b, a) for a, b in linked}
    for x, a in enumerate(eclipse):
        for b in eclipse[x + 1:]:
            if (a, b) not in linked:
                dial[a].append(f"n{b}")
                linked |= {(a, b), (b, a)}
        court = attackers[a]["court"]
        for h in sorted(rng.sample(honest, min(court, len(honest)))):
            if (a, h) not in linked:
                dial[a].append(f"n{h}")
                linked |= {(a, h), (h, a)}


def _schedule(sc: Scenario, rng: random.Random, publishers: list[int], subs: list[list[str]],
              topics: list[str]) -> dict[int, list[tuple[float, str, int]]]:
    wl = sc.workload
    targets = _targets(subs, topics, PROTOCOLS[sc.protocol.name].matching)
    times: list[tuple[float, int]] = []
    weights = [1 / (r + 1) ** wl.publisher_skew for r in range(len(publishers))]

    def pick(k: int) -> int:
        """Who publishes the k-th message: in turn, or (poisson, or a skew) drawn by Zipf weight."""
        if wl.publisher_skew:
            return rng.choices(publishers, weights)[0]
        return rng.choice(publishers) if wl.arrival == "poisson" else publishers[k % len(publishers)]
    if wl.interval is not None:
        for p in publishers:
            t = rng.uniform(0, wl.interval)
            while t < wl.duration:
                times.append((t, p))
                t += wl.interval
    elif wl.arrival == "poisson":
        t = rng.expovariate(wl.rate)
        while t < wl.duration:
            times.append((t, pick(k=len(times))))
            t += rng.expovariate(wl.rate)
    else:
        count = max(1, math.floor(wl.rate * wl.duration + 1e-9))  # n/rate x rate must give n back
        times = [(k / wl.rate, pick(k)) for k in range(count)]
    out: dict[int, list[tuple[float, str, int]]] = {p: [] for p in publishers}
    own = _own_topics(wl.publish_topics, publishers, subs, targets)
    for t, p in sorted(times):
        out[p].append((round(wl.warmup + t, 6), rng.choice(own[p] or targets), wl.message_size))
    return out


def _own_topics(publish_topics: str, publishers: list[int], subs: list[list[str]],
                targets: list[str]) -> dict[int, list[str]]:
    """Each publisher's topics to draw from (empty: any target): the ones it owns, or the targets it
    subscribes to. Computed once per publisher, not per publish (a run may publish a million times)."""
    if publish_topics == "owned":
        own: dict[int, list[str]] = {p: [] for p in publishers}
        for x, owner in topic_owners(publishers, targets).items():
            own[owner].append(x)
        return own
    if publish_topics == "subscribed":
        wanted = set(targets)
        return {p: [x for x in subs[p] if x in wanted] for p in publishers}
    return {p: [] for p in publishers}


def _targets(subs: list[list[str]], topics: list[str], matching: str) -> list[str]:
    """The topics publishers publish on: those with subscribers (all, if none has any); for
    content-based protocols, the event predicates some subscription filter matches."""
    subscribed = {t for s in subs for t in expected_topics(matching, topics, s)}
    return [t for t in topics if t in subscribed] or topics


def topic_owners(publishers: list[int], topics: list[str]) -> dict[str, int]:
    """publish_topics: owned - each topic has one publisher, dealt round-robin (a channel's author)."""
    return {t: publishers[i % len(publishers)] for i, t in enumerate(topics)}


def _authors(sc: Scenario, publishers: list[int], schedule: dict[int, list[tuple[float, str, int]]],
             subs: list[list[str]], topics: list[str]) -> dict[int, list[str]]:
    """Who creates each topic (protocols with topic authors): its owner, else its first publisher,
    else its first subscriber; a topic nobody uses has none. Content-based protocols (FastDelivery):
    every publisher creates the multicast groups covering the events it publishes."""
    if PROTOCOLS[sc.protocol.name].matching == "predicate":
        return {p: group_predicates([topic for _, topic, _ in entries]) for p, entries in schedule.items() if entries}
    first_pub: dict[str, tuple[float, int]] = {}
    for p, entries in schedule.items():
        for at, topic, _ in entries:
            if topic not in first_pub or (at, p) < first_pub[topic]:
                first_pub[topic] = (at, p)
    owners = topic_owners(publishers, _targets(subs, topics, "topic")) if sc.workload.publish_topics == "owned" else {}
    out: dict[int, list[str]] = {}
    for topic in topics:
        author = owners.get(topic, first_pub.get(topic, (0.0, None))[1])
        if author is None:
            author = next((i for i, s in enumerate(subs) if topic in s), None)
        if author is not None:
            out.setdefault(author, []).append(topic)
    return out


def _predicate_subscriptions(sc: Scenario, rng: random.Random) -> tuple[list[list[str]], list[list[tuple[float, str]]]]:
    """Each topics.predicates group's filter goes to that many nodes, sampled: at start, or (`at`)
    during the run."""
    n = sc.nodes.count
    subs: list[set[str]] = [set() for _ in range(n)]
    late: list[list[tuple[float, str]]] = [[] for _ in range(n)]
    for group in sc.topics.predicates or []:
        for i in rng.sample(range(n), group.subscribers):
            if group.at is None:
                subs[i].add(group.filter)
            else:
                late[i].append((group.at, group.filter))
    return [sorted(s) for s in subs], [sorted(x) for x in late]


def _neighbours(dial: list[list[str]]) -> list[set[str]]:
    """Each node's planned neighbours: whom it dials and who dials it."""
    neighbours: list[set[str]] = [set(d) for d in dial]
    for i, peers in enumerate(dial):
        for p in peers:
            neighbours[ids.node_index(p)].add(f"n{i}")
    return neighbours


def _node_plans(sc: Scenario, core: Any, placement: dict[str, list[Any]], *, subs: list[list[str]],
                late: list[list[tuple[float, str]]], attackers: list[dict[str, Any] | None], dial: list[list[str]],
                neighbours: list[set[str]], authors: dict[int, list[str]],
                schedule: dict[int, list[tuple[float, str, int]]], joins_at: dict[str, float],
                absent: set[str]) -> list[NodePlan]:
    """Every node's slice of the plan, its group's settings over the scenario's."""
    n = sc.nodes.count
    groups: list[Any] = []
    for g in sc.nodes.groups:
        groups += [g] * g.count
    groups += [None] * (n - len(groups))
    base_params = sc.protocol.params.model_dump()
    explicit = sc.protocol.params.model_dump(include=sc.protocol.params.model_fields_set)
    if "degree" in core.Params.model_fields:
        base_params["degree"] = sc.topology.degree
    everyone = [f"n{i}" for i in range(n)]
    nodes = []
    for i in range(n):
        g = groups[i]
        implementation = (g and g.implementation) or sc.protocol.implementation
        params = {**(base_params if implementation == PEERLAB else explicit), **(g.params if g else {})}
        nodes.append(NodePlan(
            id=f"n{i}", index=i, group=g.name if g else "default",
            role=attackers[i]["behaviour"] if attackers[i] else (g.role if g else "honest"),
            behaviour=attackers[i] or {},
            protocol=sc.protocol.name, implementation=implementation, params=params,
            bandwidth_up=(g and g.bandwidth_up) or sc.network.bandwidth_up,
            bandwidth_down=(g and g.bandwidth_down) or sc.network.bandwidth_down,
            subscriptions=subs[i], authors=authors.get(i, []), dial=dial[i], neighbours=ids.by_index(neighbours[i]),
            contacts=[p for p in everyone if p != f"n{i}"] if core.uses_directory
            else ids.by_index(neighbours[i]),
            schedule=schedule.get(i, []), late_subscriptions=late[i], joins_at=joins_at.get(f"n{i}"), absent=f"n{i}" in absent,
            placement={k: v[i] for k, v in placement.items()},
        ))
    return nodes


def make_plan(sc: Scenario, seed: int | None = None) -> RunPlan:
    seed = sc.seed if seed is None else seed
    n = sc.nodes.count
    core = PROTOCOLS[sc.protocol.name]
    content = core.matching == "predicate"
    topics = list(dict.fromkeys(sc.workload.events)) if content else sc.topics.topic_names()
    try:
        placed = sc.network.latency.matrix(n, _stream(seed, "placement"))
    except (ValueError, OSError) as err:  # a data file that does not fit the scenario
        raise ScenarioError(f"scenario {sc.name!r}", [str(err)]) from None
    matrix, placement = placed.matrix, placed.per_node
    late: list[list[tuple[float, str]]] = [[] for _ in range(n)]
    if content:
        subs, late = _predicate_subscriptions(sc, _stream(seed, "subscriptions"))
    elif isinstance(sc.topics.subscriptions, GivenSubscriptions):
        subs, late = sc.topics.subscriptions.of(n)
    else:
        subs = _subscriptions(sc, _stream(seed, "subscriptions"), topics)
    given_publishers = {p.node for p in sc.workload.schedule or []}  # never drawn as attackers or reserve
    attackers = _attackers(sc, _stream(seed, "attackers"), n, spare=given_publishers)
    for i, attack in enumerate(attackers):
        if attack and attack.get("topic") and attack["topic"] not in subs[i]:
            subs[i] = sorted(subs[i] + [attack["topic"]], key=topics.index)
    dial = _topology(sc, _stream(seed, "topology"), subs, topics)
    _attack_edges(sc, _stream(seed, "attack-edges"), attackers, dial)
    neighbours = _neighbours(dial)
    faults, joins_at = planned_faults(sc, _stream(seed, "faults"), n)
    churn_rng = _stream(seed, "churn")
    reserve: list[str] = []
    if sc.churn and sc.churn.reserve:
        candidates = [i for i in range(n) if f"n{i}" not in joins_at and i not in given_publishers]
        reserve = [f"n{i}" for i in sorted(churn_rng.sample(candidates, sc.churn.reserve))]
    absent = set(joins_at) | set(reserve)
    rng = _stream(seed, "workload")
    honest = [i for i in range(n) if attackers[i] is None and f"n{i}" not in absent]
    given = _given_schedule(sc) if sc.workload.schedule is not None else None
    if given is not None:
        not_honest = [f"n{i}" for i in given if i not in honest]
        if not_honest:
            raise ScenarioError(f"scenario {sc.name!r}", [
                f"workload.schedule: {', '.join(not_honest)} publish, but attack, join later or are churn reserve"])
    elif len(honest) < sc.workload.publishers:
        raise ScenarioError(f"scenario {sc.name!r}", [
            f"workload.publishers: {sc.workload.publishers} publishers, but only {len(honest)} honest nodes "
            "are present at T0 (the others attack, join later or are churn reserve)"])
    if given is not None:
        publishers, schedule = list(given), given
    else:
        publishers = sorted(rng.sample(honest, sc.workload.publishers))
        everyone_subs = [s + [t for _, t in x] for s, x in zip(subs, late)]  # at start or later: publishers aim at both
        schedule = _schedule(sc, rng, publishers, everyone_subs, topics)
    authors = _authors(sc, publishers, schedule, subs, topics) if core.topic_authors else {}
    if sc.churn and sc.churn.fraction is not None:
        present = [f"n{i}" for i in range(n) if f"n{i}" not in absent]
        faults = sorted(faults + churn_faults(sc, churn_rng, present, reserve), key=in_order)
        joins_at.update({e.node: e.at for e in faults if e.action == "join" and e.node not in joins_at})

    nodes = _node_plans(sc, core, placement, subs=subs, late=late, attackers=attackers, dial=dial,
                        neighbours=neighbours, authors=authors, schedule=schedule, joins_at=joins_at, absent=absent)
    return RunPlan(
        scenario=sc.name, seed=seed, protocol=sc.protocol.name, topology=topology_algorithm(sc), topics=topics,
        matching=core.matching,
        nodes=nodes,
        latency_ms=[[round(x * 1000, 3) for x in row] for row in matrix],
        latency_bucket_ms=sc.network.latency_bucket * 1000, latency_notes=placed.notes, jitter_ms=sc.network.jitter * 1000,
        loss=sc.network.loss, faults=faults, warmup=sc.workload.warmup, duration=sc.workload.duration,
        drain=sc.workload.drain, dilation=sc.dilation, tcp_congestion=sc.network.tcp_congestion,
    )
