"""Link shaping: the one package that gives every link of a run its bandwidth, latency and loss, on
every backend, at deploy and while faults change it.

    modes.py       the modes, and the one to use (`choose_mode`)
    mechanisms.py  the interface (LinkShaper) and its mechanisms: netem, the delay line, the transport;
                   each applies links' shapes (orchestrator/model/link_shape.py) with `apply_all`
    ops.py         typed operations on a link's tc tree, the only thing that enters a namespace, and their
                   wire format
    namespace_access.py  how the operations reach a namespace: in process (local), exec'd in a container
                   (docker), through each cluster node's shaping daemon (kubernetes); the backend hands one
    tc.py          the qdisc, class and filter trees themselves (HTB, netem, u32, ifb), and `apply`, which
                   runs the operations
    tcp_settings.py  each namespace's TCP: congestion control, and a dilated run's minimum RTO (sysctls)
    dilated_cubic.py  peerlab_cubic, a dilated run's congestion control (cubic in experiment time):
                   bpf/dilated_cubic.bpf.c, built once into the cache and registered while a run uses it
    delayline.py   the delay line's process, where the kernel has no netem; native/ and native_build.py
                   its C program, built once into the cache; realtime.py its real-time priority on a
                   cluster node
    agent.py, cri.py  the shaper agent a cluster node's shaping daemon runs, and how it finds pods'
                   namespaces through the CRI
    line_channel.py  a process spoken to a line at a time (the delay line's and the shaper agent's channels)
    __main__.py    the shaper entry point inside a container or pod

A run picks its mode once (`choose_mode`: netem where the kernel has it, else the delay line or the
transport) and gets one shaper for it (`shaper_for`); the manifest says which ran.

May import: pyroute2 and the standard library, orchestrator.model for types only; never
orchestrator.backends, which applies shaping: what a shaper needs of a backend is declared in
mechanisms.py (`ShapingBackend`, `LinkEnds`). The node image carries this package alone of orchestrator/.
"""
from orchestrator.shaping.mechanisms import MECHANISMS, LinkShaper, shaper_for
from orchestrator.shaping.modes import DELAYLINE, NETEM, TRANSPORT, ModeError, choose_mode
from orchestrator.shaping.tc import apply, probe_htb, probe_netem

__all__ = ["DELAYLINE", "NETEM", "TRANSPORT", "ModeError", "choose_mode", "MECHANISMS", "LinkShaper", "shaper_for",
           "apply", "probe_htb", "probe_netem"]
