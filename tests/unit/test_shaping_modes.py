"""Which shaping mode a run gets: netem where the kernel has it, else the delay line for every node
implementation; transport mode only when asked for; a mode asked for is obeyed or refused, never
replaced."""
import pytest

from orchestrator.shaping import DELAYLINE, NETEM, TRANSPORT, ModeError, choose_mode

NO_NETEM = (False, "sch_netem unavailable")
LINE_OK = lambda: (True, "NFQUEUE works")  # noqa: E731
LINE_MISSING = lambda: (False, "iptables is not installed (apt-get install iptables)")  # noqa: E731


def _never():
    raise AssertionError("the delay line was probed though it is not needed")


def test_auto():
    assert choose_mode("auto", (True, "ok"), _never, ["js-libp2p"])[0] == NETEM
    mode, why = choose_mode("auto", NO_NETEM, LINE_OK, ["js-libp2p"])
    assert mode == DELAYLINE and "sch_netem unavailable" in why and "NFQUEUE works" in why
    assert choose_mode("auto", NO_NETEM, LINE_OK, [])[0] == DELAYLINE  # peerlab's own nodes too
    with pytest.raises(ModeError, match="iptables is not installed .*; --shaping transport delays in peerlab's own"):
        choose_mode("auto", NO_NETEM, LINE_MISSING, [])  # no silent fall back to the transport


def test_asked_modes_are_obeyed_or_refused_with_the_way_out():
    assert choose_mode("delayline", (True, "ok"), LINE_OK, [])[0] == DELAYLINE
    mode, why = choose_mode("transport", NO_NETEM, _never, [])
    assert mode == TRANSPORT and why.startswith("asked for")
    with pytest.raises(ModeError, match="netem was asked for, but sch_netem unavailable; use --shaping auto"):
        choose_mode("netem", NO_NETEM, LINE_OK, [])
    with pytest.raises(ModeError, match="js-libp2p nodes have none: use --shaping auto, delayline or netem"):
        choose_mode("transport", NO_NETEM, LINE_OK, ["js-libp2p"])
    with pytest.raises(ModeError, match="needs the delay line here .* iptables is not installed"):
        choose_mode("auto", NO_NETEM, LINE_MISSING, ["js-libp2p"])
