"""The run's shaping at deploy, on any backend: every node's egress tree (HTB, netem where the mode
has it), the download caps at the far ends of the links, and in delay-line mode the delay lines
attached to every node with its per-peer delays."""
from __future__ import annotations

from typing import Any

from orchestrator import shaping
from orchestrator.backends import Backend
from orchestrator.model.plan import RunPlan
from orchestrator.run.live_faults import far_ends
from orchestrator.shaping.delayline import DelayLines


def shape_run(plan: RunPlan, backend: Backend, mode: str) -> DelayLines | None:
    """Shape every link for `mode`; the delay lines in delay-line mode, else None."""
    address_of = {n.id: backend.address(n.id) for n in plan.nodes}
    with_netem = mode == shaping.NETEM
    work: dict[str, list[dict[str, Any]]] = {}
    for node in plan.nodes:
        ends = backend.link_ends(node.id)
        shape = shaping.node_shape(plan, node.id, address_of)
        work.setdefault(ends.node_netns, []).append(shaping.egress_op(ends.node_ifname, shape, with_netem))
    for far, links in far_ends(plan, backend).items():
        work.setdefault(far, []).extend(shaping.download_op(ifname, plan.node(node_id).bandwidth_down)
                                        for node_id, ifname in links)
    backend.shape_all(work)
    if mode != shaping.DELAYLINE:
        return None
    lines = DelayLines(plan.seed, [n.id for n in plan.nodes], backend.netns_path,
                       backend.python_in_netns if backend.delayline_per_node else None)
    lines.request(op="links", ips=address_of, jitter_ms=plan.jitter_ms, loss=plan.loss)
    for node in plan.nodes:
        backend.check_stop()
        lines.attach(node.id, backend.link_ends(node.id).node_ifname, shaping.ingress_delays(plan, node.id, address_of))
    return lines
