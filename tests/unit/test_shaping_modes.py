"""Which shaping mode a run gets: netem where the kernel has it, else the delay line for adapter
nodes and transport mode for peerlab's; a mode asked for is obeyed or refused, never replaced."""
import pytest

from orchestrator.shaping import DELAYLINE, NETEM, TRANSPORT, ModeError, choose_mode

NO_NETEM = (False, "sch_netem unavailable")
LINE_OK = lambda: (True, "NFQUEUE works")  # noqa: E731
LINE_MISSING = lambda: (False, "iptables is not installed (apt-get install iptables)")  # noqa: E731


def _never():
    raise AssertionError("the delay line was probed though it is not needed")


def test_auto():
    assert choose_mode("auto", (True, "ok"), _never, ["js-libp2p"])[0] == NETEM
    assert choose_mode("auto", NO_NETEM, _never, [])[0] == TRANSPORT
    mode, why = choose_mode("auto", NO_NETEM, LINE_OK, ["js-libp2p"])
    assert mode == DELAYLINE and "sch_netem unavailable" in why and "NFQUEUE works" in why


def test_asked_modes_are_obeyed_or_refused_with_the_way_out():
    assert choose_mode("delayline", (True, "ok"), LINE_OK, [])[0] == DELAYLINE
    assert choose_mode("transport", (True, "ok"), _never, [])[0] == TRANSPORT
    with pytest.raises(ModeError, match="netem was asked for, but sch_netem unavailable; use --shaping auto"):
        choose_mode("netem", NO_NETEM, LINE_OK, [])
    with pytest.raises(ModeError, match="js-libp2p nodes have none: use --shaping auto, delayline or netem"):
        choose_mode("transport", NO_NETEM, LINE_OK, ["js-libp2p"])
    with pytest.raises(ModeError, match="needs the delay line here .* iptables is not installed"):
        choose_mode("auto", NO_NETEM, LINE_MISSING, ["js-libp2p"])
