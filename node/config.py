"""peerlab's own node's configuration file: the node contract's config (node/contract.py), which every
node implementation is given, plus what only peerlab's node takes (its control API, attacker
behaviour, the directory, transport-mode delays, limits)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from node.contract import ContractConfig
from node.framing import MAX_FRAME


class ControlConfig(BaseModel):
    token: str = Field(..., min_length=16)
    unix: str | None = Field(None, description="Unix socket path (local backend)")
    host: str | None = Field(None, description="TCP address (containers)")
    port: int | None = None


class NodeConfig(ContractConfig):
    role: str = "honest"
    directory: dict[str, list[str]] = Field(default_factory=dict, description="every other node's topics, "
                                            "for cores that choose their own neighbours")
    behaviour: dict[str, Any] = Field(default_factory=dict, description="attackers: the behaviour and its "
                                      "settings (node/behaviours.py)")
    authors: list[str] = Field(default_factory=list, description="topics this node creates at start")
    nodes: int = Field(0, ge=0, description="the run's node count (n0 .. n<nodes-1>): with `seed`, every "
                   "node's identity (node/identity.py), so a message's peer id names its origin")
    control: ControlConfig
    # Transport-mode latency (kernels without sch_netem): one-way delay per destination, real ms (with
    # dilation, the plan's latency times the factor: shaping's values, orchestrator/model/dilation.py).
    delays_ms: dict[str, float] = Field(default_factory=dict)
    jitter_ms: float = 0.0
    loss: float = 0.0
    dilation: float = Field(1.0, ge=1, description="time dilation (node/dilation.py): the node's clock, timers and "
                            "event log run this many times slower than real time, from dilation_epoch_ns")
    dilation_epoch_ns: int = Field(0, description="the run's common epoch for dilation (unix ns, real time)")
    max_frame: int = MAX_FRAME
    send_queue_limit: int = 256 * 1024 * 1024


def load_config(path: str | None = None) -> NodeConfig:
    path = path or os.environ.get("PEERLAB_NODE_CONFIG")
    if not path:
        raise SystemExit("node: no config (give --config FILE or set PEERLAB_NODE_CONFIG)")
    data = json.loads(Path(path).read_text())
    # on Kubernetes the token comes from a Secret, so that the plan's ConfigMap holds none
    token = os.environ.get("PEERLAB_CONTROL_TOKEN")
    if token:
        data.setdefault("control", {})["token"] = token
    return NodeConfig.model_validate(data)
