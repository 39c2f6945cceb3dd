"""The tc tree shaping builds, read back from the kernel; pure helpers."""
import io
import json
import subprocess
from pathlib import Path

import pytest
from pyroute2 import NetNS, netns

from orchestrator.shaping import agent, ops, tcp_settings
from orchestrator.shaping import tc as shaping
from tests.support import links

pytestmark = pytest.mark.exclusive


def test_quantum_and_netem_limit():
    assert shaping.htb_quantum(50_000_000) == 6250
    assert shaping.htb_quantum(1_000_000) == 1514
    assert shaping.htb_quantum(10**10) == 60_000
    assert shaping.htb_burst(50_000_000) == 12_500      # 2 ms of the rate
    assert shaping.htb_burst(1_000_000) == 1514         # never less than a frame
    assert shaping.netem_limit(50_000_000, 10, 0) == 1000
    # 1 Gbit/s x 500 ms = 62.5 MB in flight, ~41k frames; twice that
    assert shaping.netem_limit(10**9, 500, 0) == pytest.approx(2 * 10**9 / 8 * 0.5 / 1514, rel=0.01)


@pytest.fixture
def veth_pair():
    with links.veth_pair() as pair:
        yield pair


@pytest.mark.emulation
def test_tree_is_built_as_documented(veth_pair):
    a, b = veth_pair
    has_netem, _ = shaping.probe_netem()
    buckets = ((10.0, ("10.9.0.2", "10.9.0.3")), (40.0, ("10.9.0.4",))) if has_netem else ()
    with NetNS(a, flags=0) as ns:
        shaping.shape_egress(ns, "eth0", 50_000_000, buckets, 2.0, 0.01)
        tree = shaping.describe(ns, "eth0")
        shaping.shape_egress(ns, "eth0", 50_000_000, buckets, 2.0, 0.01)  # re-shaping replaces, not stacks
        assert shaping.describe(ns, "eth0") == tree
    with NetNS(b, flags=0) as ns:
        shaping.shape_download(ns, "eth0", 20_000_000)
        down = shaping.describe(ns, "eth0")
    assert "qdisc htb 1: parent root" in tree
    assert "class htb 1:1 parent root rate 50000000bit" in tree
    assert any(line.startswith("class htb 1:2 parent 1:1") for line in tree)
    if has_netem:
        assert sum("qdisc netem" in line for line in tree) == 2
        assert any(line.startswith("class htb 1:11 parent 1:1") for line in tree)
    else:
        assert not any("netem" in line for line in tree)
    assert "class htb 1:1 parent root rate 20000000bit" in down
    assert "class htb 1:2 parent 1:1 rate 20000000bit" in down and "qdisc pfifo 2: parent 1:2" in down


@pytest.mark.emulation
def test_probe_leaves_nothing_behind():
    before = set(netns.listnetns())
    shaping.probe_netem()
    shaping.probe_htb()
    assert set(netns.listnetns()) == before


@pytest.mark.emulation
def test_cut_drops_traffic_and_heal_and_rate_change_act_in_place(veth_pair):
    import subprocess
    import sys

    a, b = veth_pair
    links.address(a, b)
    server = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c",
                               "import socket,time\ns=socket.socket();s.bind(('10.9.0.2',5001));s.listen(64)\n"
                               "while True:\n c,_=s.accept();c.close()"])
    try:
        with NetNS(a, flags=0) as ns:
            shaping.shape_egress(ns, "eth0", 50_000_000)
        assert links.connects(a, "10.9.0.2", 5001, within=15)
        with NetNS(a, flags=0) as ns:  # what reaches b from a (as on a switch port), at deploy
            shaping.prepare_cut(ns, "eth0", ["10.9.0.1"], 0)
        assert links.connects(a, "10.9.0.2", 5001, within=15)  # filters to no class yet: nothing changes
        for _ in range(2):  # cut, heal, and again (the filters stay between)
            with NetNS(a, flags=0) as ns:
                shaping.cut_off(ns, "eth0", 0)
                tree = shaping.describe(ns, "eth0")
            assert "class htb 1:30 parent 1:1 rate 8000bit" in tree and "qdisc pfifo 30: parent 1:30" in tree
            assert not links.connects(a, "10.9.0.2", 5001)  # a's SYNs dropped at the cut
            with NetNS(a, flags=0) as ns:
                shaping.reconnect(ns, "eth0")
                assert not any("1:30" in line for line in shaping.describe(ns, "eth0"))
                assert ns.get_filters(index=ns.link_lookup(ifname="eth0")[0], parent=0x10000)
                shaping.reconnect(ns, "eth0")  # healing twice is harmless
            assert links.connects(a, "10.9.0.2", 5001, within=15)
        with NetNS(a, flags=0) as ns:
            shaping.set_rate(ns, "eth0", 5_000_000)
            tree = shaping.describe(ns, "eth0")
        assert links.connects(a, "10.9.0.2", 5001, within=15)
        assert "class htb 1:1 parent root rate 5000000bit" in tree
    finally:
        server.kill()
        server.wait()


def _shaper(ns_name: str, todo: list) -> list:
    """The shaper entry point run inside a namespace, as the docker backend's sandbox runs it."""
    import json
    import subprocess
    import sys

    out = subprocess.run(["ip", "netns", "exec", ns_name, sys.executable, "-m", "orchestrator.shaping",
                          "--ops", json.dumps(ops.to_wire(todo))], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.emulation
def test_pod_layout_caps_download_on_an_ifb_and_cuts_there(veth_pair):
    """Where the far end of the link is out of reach (a pod), the node's own ingress is redirected
    to an ifb that carries the switch-side tree: the download cap is measured, a cut drops there."""
    a, b = veth_pair
    links.address(a, b)
    assert _shaper(b, [ops.Probe(kind="htb")])[0]["ok"]
    _shaper(b, [ops.RedirectIngress("eth0", "ifb0"), ops.Download("ifb0", 10_000_000)])
    _shaper(b, [ops.RedirectIngress("eth0", "ifb0")])  # doing it again replaces, not stacks
    mbit = links.received_mbit(a, b, "10.9.0.2")
    assert 8.0 < mbit < 10.5, mbit
    # a partition elsewhere leaves the cap in place (the cut's class must not make the node's
    # default class an inner one: HTB passes such traffic unshaped)
    _shaper(b, [ops.PrepareCut("ifb0", ("10.9.0.99",), 0), ops.Cut("ifb0", 0)])
    mbit = links.received_mbit(a, b, "10.9.0.2")
    assert 8.0 < mbit < 10.5, mbit
    # a partition's filters ahead of it: their class does not exist, so the default class (the cap)
    # takes what they match
    _shaper(b, [ops.Heal("ifb0"), ops.PrepareCut("ifb0", ("10.9.0.1",), 1)])
    mbit = links.received_mbit(a, b, "10.9.0.2")
    assert 8.0 < mbit < 10.5, mbit
    _shaper(b, [ops.Cut("ifb0", 1)])
    assert not links.connects(a, "10.9.0.2", 5002)
    _shaper(b, [ops.Heal("ifb0"), ops.Rate("ifb0", 30_000_000)])
    mbit = links.received_mbit(a, b, "10.9.0.2")
    assert 25.0 < mbit < 31.0, mbit


@pytest.mark.emulation
def test_a_namespaces_tcp_is_set_from_outside_by_the_agent_and_read_back(veth_pair):
    """What a cluster node's shaping daemon does for a pod before its node starts: the agent, in its
    own namespace, writes the scenario's congestion control and a dilated minimum RTO into another
    namespace given by its file, reads them back, and leaves its own namespace as it was; a sysctl
    the kernel lacks is refused by name, the rest of the batch not done."""
    a, _ = veth_pair
    own = {name: (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
           for name in (tcp_settings.CONGESTION_SYSCTL, tcp_settings.RTO_MIN_SYSCTL)}
    wanted = {tcp_settings.CONGESTION_SYSCTL: "reno" if own[tcp_settings.CONGESTION_SYSCTL] != "reno" else "cubic",
              tcp_settings.RTO_MIN_SYSCTL: "1600000"}
    tcp_settings.ensure_allowed(wanted[tcp_settings.CONGESTION_SYSCTL])
    path = f"/run/netns/{a}"
    requests = [{"batch": [{"netns": path, "ops": ops.to_wire([ops.Sysctls(values=wanted), ops.Describe("eth0")])}]},
                {"batch": [{"netns": path, "ops": ops.to_wire([ops.Sysctls(values={"net.ipv4.no_such_thing": "1"})])}]}]
    out = io.StringIO()
    agent.serve(io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), out)
    done, refused = (json.loads(line) for line in out.getvalue().splitlines())
    assert done["done"][0][0] == {"op": "sysctls", "ifname": "lo", "values": wanted}
    read = subprocess.run(["ip", "netns", "exec", a, "sysctl", "-n", tcp_settings.CONGESTION_SYSCTL, tcp_settings.RTO_MIN_SYSCTL],
                          capture_output=True, text=True, check=True).stdout.split()
    assert read == [wanted[tcp_settings.CONGESTION_SYSCTL], "1600000"]
    assert {name: (Path("/proc/sys") / name.replace(".", "/")).read_text().strip() for name in own} == own
    assert refused == {"error": "RuntimeError: net.ipv4.no_such_thing: this machine's kernel has no such sysctl",
                       "item": 0}
