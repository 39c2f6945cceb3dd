"""Which of the three modes applies latency on this run (`choose_mode`), and their names. What each
node's link gets is its shape (orchestrator/model/link_shape.py), applied by the mode's mechanism
(mechanisms.py); this module needs no kernel.
"""
from __future__ import annotations

from typing import Any

NETEM = "netem"
TRANSPORT = "transport"
DELAYLINE = "delayline"


class ModeError(ValueError):
    """A shaping mode that cannot run here; the message says what to ask for instead."""


def choose_mode(asked: str, netem: tuple[bool, str], delay_line: Any, adapters: list[str]) -> tuple[str, str]:
    """The mode a run shapes latency with, and why: netem where the kernel has it, else the delay line,
    for every node implementation alike (one mechanism outside the nodes); transport mode only when
    asked for. A mode asked for is obeyed or refused (ModeError), never replaced. `netem` is the
    probe's answer; `delay_line()` probes the delay line, only when it is needed."""
    has_netem, why = netem
    if asked == NETEM and not has_netem:
        raise ModeError(f"--shaping netem was asked for, but {why}; use --shaping auto, delayline or transport")
    if asked == TRANSPORT and adapters:
        raise ModeError(f"--shaping transport delays in peerlab's node transport; {', '.join(adapters)} nodes "
                        "have none: use --shaping auto, delayline or netem")
    if asked == NETEM or (asked == "auto" and has_netem):
        return NETEM, why
    if asked == TRANSPORT:
        return TRANSPORT, f"asked for; {why}"
    ok, detail = delay_line()
    if not ok:
        way_out = "" if adapters else "; --shaping transport delays in peerlab's own nodes instead"
        raise ModeError(f"latency needs the delay line here ({why}), but {detail}{way_out}")
    return DELAYLINE, f"{why}; {detail}"

