"""Message validators for the pubsub cores: the application's verdict on a message before it is
delivered and relayed, as in libp2p pubsub (Accept, Reject, Ignore).

Accept delivers and relays; Reject drops the message and counts against every peer that sent it
(the P4 input of GossipSub's score); Ignore drops it without blame. A rule is chosen by name in the
protocol parameters (`validation: {rule: reject-origins, origins: [n3]}`); `delay` models the
application's validation work (signature checks, state lookups): the verdict comes that many
seconds after the message arrived. `work: cpu` makes that delay real CPU work, where the node can do it
(the go-libp2p and rust-libp2p adapters); peerlab's own cores, which also run in the simulator, wait.
"""
from __future__ import annotations

import enum
from typing import Callable, Literal

from pydantic import Field, model_validator

from node.protocols.base import Params


class Verdict(enum.Enum):
    ACCEPT = "accept"
    REJECT = "reject"
    IGNORE = "ignore"


class ValidationParams(Params):
    rule: Literal["accept", "reject-origins", "ignore-origins", "max-size"] = Field(
        "accept", description="accept: everything; reject-/ignore-origins: messages authored by `origins`; "
                              "max-size: reject payloads above `max_size` bytes")
    origins: list[str] = Field(default_factory=list, description="node ids, for the *-origins rules")
    max_size: int | None = Field(None, gt=0, description="bytes, for the max-size rule")
    delay: float = Field(0.0, ge=0, description="seconds of validation work before the verdict")
    work: Literal["sleep", "cpu"] = Field(
        "sleep", description="what the delay is: sleep (a wait, as Shadow's and gossipsub-interop's model), or "
                             "cpu (that much of a core's time computing; the go-libp2p and rust-libp2p adapters)")

    @model_validator(mode="after")
    def _rule_inputs(self) -> "ValidationParams":
        if self.rule.endswith("-origins") and not self.origins:
            raise ValueError(f"validation.rule {self.rule} needs validation.origins (a list of node ids)")
        if self.rule == "max-size" and self.max_size is None:
            raise ValueError("validation.rule max-size needs validation.max_size (bytes)")
        return self


Validator = Callable[[str, str, bytes], Verdict]  # (topic, origin, data) -> verdict


def make_validator(p: ValidationParams) -> Validator:
    origins = frozenset(p.origins)
    if p.rule == "reject-origins":
        return lambda topic, origin, data: Verdict.REJECT if origin in origins else Verdict.ACCEPT
    if p.rule == "ignore-origins":
        return lambda topic, origin, data: Verdict.IGNORE if origin in origins else Verdict.ACCEPT
    if p.rule == "max-size":
        limit = p.max_size
        return lambda topic, origin, data: Verdict.REJECT if len(data) > limit else Verdict.ACCEPT
    return lambda topic, origin, data: Verdict.ACCEPT
