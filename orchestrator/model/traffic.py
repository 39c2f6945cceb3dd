"""The topics and workload sections of a scenario: which topics there are, who subscribes to what
(interest, zipf, round-robin, given; predicate groups for the content-based protocols), and who
publishes what and when (drawn from a rate or interval, or a given schedule)."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from node.protocols.content.predicates import Predicate, PredicateError

from .given import GivenSubscriptions, Publish
from .strict import Strict
from .units import Duration, Rate, Size


class Interest(Strict):
    model: Literal["interest"]
    rate: float = Field(..., gt=0, le=1, description="probability a node subscribes to each topic")


class Zipf(Strict):
    model: Literal["zipf"]
    alpha: float = Field(..., ge=0, le=20, description="popularity skew: topic i (from 1) weighs i^-alpha")
    size: int = Field(..., gt=0, description="topics per node")


class RoundRobin(Strict):
    """Node i subscribes to topic i mod topics.count, one topic each (gossipsub-interop's simple-fanout:
    even nodes on one topic, odd ones on the other)."""
    model: Literal["round-robin"]


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
    names: list[str] | None = Field(None, description="the topics' names (default t0, t1, ...; count follows)")
    subscriptions: Annotated[Union[Interest, Zipf, RoundRobin, GivenSubscriptions], Field(discriminator="model")] = Field(
        default_factory=lambda: Interest(model="interest", rate=1.0))
    predicates: list[PredicateGroup] | None = Field(
        None, description="content-based protocols (matching by predicate): who subscribes to which filter, instead of "
                          "count and subscriptions; publishers publish workload.events")

    @model_validator(mode="after")
    def _size_fits(self) -> "Topics":
        if self.names is not None:
            if not self.names or len(set(self.names)) != len(self.names) or not all(self.names):
                raise ValueError("names: give each topic a name of its own")
            if "count" in self.model_fields_set and self.count != len(self.names):
                raise ValueError(f"count ({self.count}) and names ({len(self.names)}) disagree; leave count out")
            self.count = len(self.names)
        if isinstance(self.subscriptions, Zipf) and self.subscriptions.size > self.count:
            raise ValueError(f"subscriptions.size ({self.subscriptions.size}) exceeds topics.count ({self.count})")
        if isinstance(self.subscriptions, GivenSubscriptions):
            known = set(self.topic_names())
            for where, topic in self.subscriptions.topics():
                if topic not in known:
                    raise ValueError(f"{where.removeprefix('topics.')}: {topic!r} is not a topic "
                                     f"({', '.join(self.topic_names()[:5])}{', ...' if self.count > 5 else ''})")
        return self

    def topic_names(self) -> list[str]:
        return list(self.names) if self.names is not None else [f"t{i}" for i in range(self.count)]


MAX_PUBLISHES = 1_000_000  # planning lists every publish: tens of millions take minutes and gigabytes


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
    schedule: list[Publish] | None = Field(None, description="every publish, listed (an imported experiment), "
                                           "instead of publishers, rate or interval: each at warmup or later and "
                                           "within warmup + duration")

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
        if self.schedule is not None:
            return self._given_schedule()
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
        planned = self.rate * self.duration if self.rate is not None else self.publishers * self.duration / self.interval
        if planned > MAX_PUBLISHES:
            raise ValueError(f"{planned:.3g} messages planned (rate x duration, or publishers x duration / interval); "
                             f"a run publishes at most {MAX_PUBLISHES:,}: lower the rate or shorten the duration")
        return self

    def messages(self) -> float:
        """How many messages the workload publishes (drawn with poisson arrivals: on average)."""
        if self.schedule is not None:
            return len(self.schedule)
        if self.messages_per_publisher:
            return self.messages_per_publisher * self.publishers
        if self.rate:
            return self.rate * self.duration
        return self.publishers * self.duration / (self.interval or 1.0)

    def mean_size(self) -> float:
        """The mean message size in bytes."""
        return sum(p.size for p in self.schedule) / len(self.schedule) if self.schedule else self.message_size

    def _given_schedule(self) -> "Workload":
        drawn = {"publishers", "rate", "interval", "arrival", "publish_topics", "publisher_skew",
                 "messages_per_publisher", "message_size", "events"} & self.model_fields_set
        if drawn:
            raise ValueError(f"schedule lists every publish; leave out {', '.join(sorted(drawn))}")
        if not self.schedule or len(self.schedule) > MAX_PUBLISHES:
            raise ValueError(f"schedule: list 1 to {MAX_PUBLISHES:,} publishes")
        end = self.warmup + self.duration
        for k, publish in enumerate(self.schedule):
            if not self.warmup - 1e-9 <= publish.at <= end + 1e-9:
                raise ValueError(f"schedule[{k}].at: {publish.at:g} s is outside the publishing window "
                                 f"(warmup {self.warmup:g} s to warmup + duration {end:g} s)")
        self.publishers = len({p.node for p in self.schedule})
        return self
