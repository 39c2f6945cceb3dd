"""The discrete-event network model (node/simulated/virtual_network.py) that the sim backend runs on: serialisation at
the upload rate shared by the connections sending, each in order with a priority lane, the download
FIFO, header overhead, TCP's window, jitter that never reorders, loss, crash/restart with redial."""
from __future__ import annotations

import pytest

from node.protocols.base import ProtocolCore
from node.simulated import access_link
from node.simulated.access_link import MSS, SEGMENT_HEADERS, wire_bytes
from node.simulated.tcp_window import IW_SEGMENTS, LOSS_BETA
from node.simulated.virtual_network import MemNetwork

MBIT = 1_000_000


class Probe(ProtocolCore):
    """Records what arrives and which peers come and go; sends only when told to."""
    name = "probe"

    def on_start(self) -> None:
        self.got: list[tuple[float, str, bytes]] = []
        self.ups: list[tuple[float, str]] = []
        self.downs: list[tuple[float, str]] = []

    def on_frame(self, peer: str, payload: bytes) -> None:
        self.got.append((self.clock(), peer, payload))

    def on_peer_up(self, peer: str, outbound: bool) -> None:
        self.ups.append((self.clock(), peer))

    def on_peer_down(self, peer: str) -> None:
        self.downs.append((self.clock(), peer))


def pair(up: float = 8 * MBIT, down: float = 8 * MBIT, latency: float = 0.05, **kw) -> MemNetwork:
    net = MemNetwork(seed=3, latency=latency, **kw)
    for name in ("a", "b", "c"):
        net.add_node(name, Probe, bandwidth=(up, down))
    net.connect("a", "b")
    net.connect("c", "b")
    net.run(until=1.0)
    return net


def arrivals(net: MemNetwork, node: str = "b") -> list[float]:
    return [t for t, _, _ in net.nodes[node].core.got]


def test_wire_size_counts_framing_and_segment_headers():
    assert wire_bytes(100) == 100 + 1 + 1 + 1 + SEGMENT_HEADERS            # one segment
    big = wire_bytes(1_000_000)
    assert big - 1_000_000 == pytest.approx(-(-1_000_000 // MSS) * SEGMENT_HEADERS, abs=10)


def test_frames_leave_one_after_another_at_the_upload_rate():
    net = pair(tcp_windows=False)  # the queue alone (the window's own test is below)
    size = 100_000
    tx = wire_bytes(size) * 8 / (8 * MBIT)   # 0.1 s a frame
    for k in range(3):
        net.nodes["a"].core.io.send("b", bytes([k]) * size)
    net.run(until=3)
    # FIFO: the k-th frame's last bit leaves after (k+1) serialisations, then 50 ms of latency
    assert arrivals(net) == pytest.approx([1.0 + (k + 1) * tx + 0.05 for k in range(3)])
    assert [p[0] for _, _, p in net.nodes["b"].core.got] == [0, 1, 2]


def test_a_frame_larger_than_the_window_waits_round_trips_and_the_window_grows():
    """TCP's congestion window: a fresh connection sends 10 segments (14,480 bytes) in its first
    round trip and doubles the window each round trip after; at 100 ms per round trip a 50 KB frame
    (flights of 14,480, 28,960, then the rest) arrives two round trips later than serialisation
    alone would bring it; the next one, the window grown, goes at once; after an idle second the
    window is back to 10 segments."""
    net = pair(up=1000 * MBIT, down=1000 * MBIT)  # serialisation ~0.4 ms: the round trips dominate
    io = net.nodes["a"].core.io
    io.send("b", bytes(50_000))
    net.run(until=2.0)
    first = arrivals(net)[0] - 1.0
    assert first == pytest.approx(2 * 0.1 + 0.05, abs=0.002)
    io.send("b", bytes(50_000))  # at 2.0 s: idle for 1.8 s, the window restarts cold
    net.run(until=3.0)
    assert arrivals(net)[1] - 2.0 == pytest.approx(first, abs=0.002)
    io.send("b", bytes(50_000))
    io.send("b", bytes(50_000))  # the window grown by the first: no more waiting than serialisation
    net.run(until=4.0)
    assert arrivals(net)[3] - arrivals(net)[2] < 0.002
    assert [len(p) for _, _, p in net.nodes["b"].core.got] == [50_000] * 4  # in order, all there


def test_a_frame_behind_others_on_a_busy_connection_waits_for_the_room_they_hold():
    """The window counts bytes in flight whatever frame they belong to, as TCP's byte stream does:
    three 50 KB frames sent at once on a fresh connection are 150 KB of stream, which leaves in
    flights of 14,480, 28,960, 57,920 (the first two frames, whole, by the third round trip) and then
    the rest: the third frame arrives a round trip after the first two, not with them."""
    net = pair(up=1000 * MBIT, down=1000 * MBIT)  # serialisation ~0.4 ms: the round trips dominate
    io = net.nodes["a"].core.io
    for k in range(3):
        io.send("b", bytes([k]) * 50_000)
    net.run(until=2.0)
    got = [t - 1.0 for t in arrivals(net)]
    assert got[:2] == pytest.approx([2 * 0.1 + 0.05] * 2, abs=0.003)
    assert got[2] == pytest.approx(3 * 0.1 + 0.05, abs=0.003)
    assert [p[0] for _, _, p in net.nodes["b"].core.got] == [0, 1, 2]


def test_small_frames_do_not_keep_a_window_open_as_large_ones_do():
    """Congestion window validation: a connection that only sends small frames (IDONTWANT, IHAVE) is
    never idle, yet Linux halves its window towards the initial one for each RTO it goes unused, so
    after a few RTOs the next 50 KB frame pays the cold window's round trips again; a 50 KB frame
    every RTO keeps the window grown."""
    net = pair(up=1000 * MBIT, down=1000 * MBIT)
    io = net.nodes["a"].core.io
    io.send("b", bytes(50_000))
    net.run(until=1.6)
    cold = arrivals(net)[0] - 1.0
    for i in range(24):  # a 100-byte frame every 0.1 s for 2.4 s (an RTO is 0.3 s here)
        net.run(until=1.6 + 0.1 * i)
        io.send("b", bytes(100))
    net.run(until=4.1)
    io.send("b", bytes(50_000))
    net.run(until=4.7)
    assert arrivals(net)[-1] - 4.1 == pytest.approx(cold, abs=0.002)
    for i in range(6):  # large frames 0.25 s apart: once grown, the window stays
        io.send("b", bytes(50_000))
        net.run(until=4.7 + 0.25 * (i + 1))
        if i:
            assert arrivals(net)[-1] - (4.7 + 0.25 * i) < 0.05 + 0.002
    assert [len(p) for _, _, p in net.nodes["b"].core.got][-6:] == [50_000] * 6


def test_connections_sending_at_once_share_the_uplink_equally():
    """The kernel interleaves a node's connections on its link: two 100 KB frames to two peers both
    arrive after two serialisations (not one after one, the other after two, as a FIFO would have
    it), and a small frame to a third peer does not wait behind them."""
    net = MemNetwork(seed=3, latency=0.05, tcp_windows=False)
    for name in ("a", "b", "c", "d"):
        net.add_node(name, Probe, bandwidth=(8 * MBIT, 8 * MBIT))
    for peer in ("b", "c", "d"):
        net.connect("a", peer)
    net.run(until=1.0)
    io = net.nodes["a"].core.io
    tx = wire_bytes(100_000) * 8 / (8 * MBIT)
    io.send("b", bytes(100_000))
    io.send("c", bytes(100_000))
    net.run(until=1.0 + tx / 2)   # each has sent a quarter of its frame
    io.send("d", bytes(1_000))    # a third of the wire from now on, until it has left
    net.run(until=3)
    small = wire_bytes(1_000) * 8 / (8 * MBIT)
    assert arrivals(net, "d") == pytest.approx([1.0 + tx / 2 + 3 * small + 0.05])
    assert arrivals(net, "b") == pytest.approx([1.0 + 2 * tx + small + 0.05])
    assert arrivals(net, "c") == arrivals(net, "b")


def test_a_connection_waiting_for_acknowledgements_leaves_the_uplink_to_the_others():
    """A large frame on a cold connection goes in flights a round trip apart (10 segments, then 20,
    ...): between them the link is free, and a frame to another peer sent meanwhile takes its own
    serialisation only, not a share of the large frame's."""
    net = MemNetwork(seed=3, latency=0.05)
    for name in ("a", "b", "c"):
        net.add_node(name, Probe, bandwidth=(8 * MBIT, 8 * MBIT))
    net.connect("a", "b")
    net.connect("a", "c")
    net.run(until=1.0)
    io = net.nodes["a"].core.io
    io.send("b", bytes(1_000_000))   # first flight: 14,480 bytes, 15 ms; then it waits until 1.1 s
    net.run(until=1.05)
    assert io.backlog("b") == 1_000_000
    io.send("c", bytes(10_000))
    net.run(until=3)
    assert arrivals(net, "c") == pytest.approx([1.05 + wire_bytes(10_000) / 1e6 + 0.05])
    # flights of 14,480, 28,960 and 57,920 bytes start a round trip apart (0, 0.1, 0.2 s); from the
    # fourth (0.3 s) the window exceeds what the link carries in a round trip: the rest back to back
    rest = wire_bytes(1_000_000) * (1_000_000 - 101_360) / 1_000_000 / 1e6
    assert arrivals(net, "b") == pytest.approx([1.0 + 0.3 + rest + 0.05], abs=0.002)


def test_priority_frames_overtake_queued_frames_not_the_one_on_the_wire():
    net = pair()
    io = net.nodes["a"].core.io
    for k in range(3):
        io.send("b", bytes([k]) * 100_000)
    io.send("b", b"urgent", priority=True)
    net.run(until=3)
    order = [p[:1] if p != b"urgent" else b"U" for _, _, p in net.nodes["b"].core.got]
    assert order == [b"\x00", b"U", b"\x01", b"\x02"]


def test_backlog_counts_bytes_waiting_and_empties():
    net = pair()
    io = net.nodes["a"].core.io
    for _ in range(3):
        io.send("b", bytes(10_000))
    assert io.backlog("b") == 30_000 and io.backlog("c") == 0
    net.run(until=1.011)   # the first frame (10.1 ms on the wire) has left
    assert io.backlog("b") == 20_000
    net.run(until=2)
    assert io.backlog("b") == 0


def test_two_senders_share_the_receivers_download():
    net = pair(up=8 * MBIT, down=8 * MBIT, tcp_windows=False)  # the links alone
    size = 100_000
    tx = wire_bytes(size) * 8 / (8 * MBIT)
    net.nodes["a"].core.io.send("b", bytes(size))
    net.nodes["c"].core.io.send("b", bytes(size))
    net.run(until=3)
    # both uploads finish together; b's download takes them one after the other
    assert arrivals(net) == pytest.approx([1.0 + tx + 0.05, 1.0 + 2 * tx + 0.05])


def test_a_fast_download_adds_nothing_and_a_slow_one_sets_the_pace():
    fast = pair(up=8 * MBIT, down=80 * MBIT, tcp_windows=False)  # the links alone
    slow = pair(up=8 * MBIT, down=2 * MBIT, tcp_windows=False)
    size = 100_000
    for net in (fast, slow):
        net.nodes["a"].core.io.send("b", bytes(size))
        net.run(until=3)
    wire = wire_bytes(size) * 8
    assert arrivals(fast) == pytest.approx([1.0 + wire / (8 * MBIT) + 0.05])
    # cut-through: the download starts when the first bit arrives and runs at 2 Mbit/s
    assert arrivals(slow) == pytest.approx([1.0 + 0.05 + wire / (2 * MBIT)])


def _queue_at_b(fill: float, at: float, up: float = 8 * MBIT) -> MemNetwork:
    """a and b (8 Mbit/s down, 100 ms round trip), connected; at `at`, `fill` wire bytes other peers
    sent have just reached b's download queue."""
    net = MemNetwork(seed=3, latency=0.05)
    net.add_node("a", Probe, bandwidth=(up, 8 * MBIT))
    net.add_node("b", Probe, bandwidth=(8 * MBIT, 8 * MBIT))
    net.connect("a", "b")
    net.run(until=at)
    net.access["b"].take(net.now, fill, 0.0)
    return net


def test_acknowledgements_wait_for_the_download_queue():
    """A flight's acknowledgements leave the receiver once its first byte is through the download
    queue, so a queue there slows the sender's window: a 50 KB frame on a cold window (flights of 10,
    20 and 5 segments) behind 500 KB in b's queue waits for that queue once, and its next flights go a
    round trip after the previous one got through, not a round trip after it left."""
    net = _queue_at_b(500_000, 1.0)     # b's 8 Mbit/s (1 MB/s) downlink busy until 1.5 s
    net.nodes["a"].core.io.send("b", bytes(50_000))
    net.run(until=4)
    # first flight: through b's queue at 1.5 s, acknowledged at 1.55; the second flight a round trip
    # later (its acknowledgement at 1.65), the third's 5 segments then: at b 1.7 s and their wire time
    third = wire_bytes(50_000) - 30 * (MSS + SEGMENT_HEADERS)
    assert arrivals(net) == pytest.approx([1.5 + 0.05 + 0.1 + 0.05 + third / 1e6], abs=0.003)
    # (with acknowledgements a round trip after each flight left, it was all through at about 1.55 s)


def test_a_full_download_queue_drops_and_tcp_sends_the_bytes_again():
    """The downlink's queue holds DOWNLINK_QUEUE_PACKETS full segments, as the emulation's pfifo does;
    what comes while it is full is dropped: the sender cuts its window to LOSS_BETA of it and sends
    the bytes again a round trip later; the frames after them on the connection wait for them (TCP
    delivers in order), and nothing is lost for the protocol."""
    net = _queue_at_b(0, 1.0, up=80 * MBIT)
    io = net.nodes["a"].core.io
    io.send("b", bytes(10_000))   # one flight, at b from 1.05 s: most of it dropped
    io.send("b", bytes(1_000))    # behind it
    window = net.uplinks._windows[("a", "b")][1]
    net.run(until=1.0499)
    net.access["b"].take(net.now, access_link.DOWNLINK_QUEUE_BYTES, 0.0)   # full as a's first bytes come
    net.run(until=1.09)
    assert window.cwnd == IW_SEGMENTS * MSS and window.ssthresh == float("inf")
    net.run(until=1.11)   # b's acknowledgements of what came after the hole reach a
    assert window.cwnd == window.ssthresh == int(IW_SEGMENTS * MSS * LOSS_BETA)
    net.run(until=5)
    assert [len(p) for _, _, p in net.nodes["b"].core.got] == [10_000, 1_000]
    # the queue had drained a round trip's worth when the dropped bytes came again: both through
    # behind it, at the time the queue (full at 1.05 s) needed plus their own bytes
    full = access_link.DOWNLINK_QUEUE_BYTES / 1e6
    assert arrivals(net)[0] == pytest.approx(1.05 + full, abs=0.015)
    assert arrivals(net)[1] >= arrivals(net)[0]


def test_without_bandwidth_frames_take_the_latency_only():
    net = MemNetwork(seed=1, latency=0.02)
    for name in ("a", "b"):
        net.add_node(name, Probe)
    net.connect("a", "b")
    net.run(until=1)
    net.nodes["a"].core.io.send("b", bytes(1_000_000))
    net.run(until=2)
    assert arrivals(net) == pytest.approx([1.02])


def test_jitter_varies_delay_but_never_reorders_a_connection():
    net = MemNetwork(seed=5, latency=0.05, jitter=0.04)
    for name in ("a", "b"):
        net.add_node(name, Probe)
    net.connect("a", "b")
    net.run(until=1)
    send = [1 + k * 0.1 for k in range(50)] + [6 + k * 0.002 for k in range(200)]  # spaced, then a burst
    for k, t in enumerate(send):
        net.schedule(t - 1, lambda k=k: net.nodes["a"].core.io.send("b", k.to_bytes(2, "big")))
    net.run(until=10)
    got = net.nodes["b"].core.got
    assert [int.from_bytes(p, "big") for _, _, p in got] == list(range(250))
    delays = [t - send[k] for k, (t, _, _) in enumerate(got[:50])]
    assert min(delays) >= 0.01 - 1e-9 and max(delays) <= 0.09 + 1e-9 and max(delays) - min(delays) > 0.05


def test_loss_drops_frames_and_logs_them():
    net = pair(loss=0.2)
    for _ in range(2000):
        net.nodes["a"].core.io.send("b", b"x")
    net.run(until=5)
    lost = [e for e in net.nodes["a"].events if e["type"] == "drop_rpc"]
    assert len(lost) + len(net.nodes["b"].core.got) == 2000
    assert 0.17 < len(lost) / 2000 < 0.23 and lost[0]["reason"] == "emulated loss"


def test_crash_loses_queued_frames_and_the_dialer_redials_after_restart():
    net = pair()
    for _ in range(5):
        net.nodes["b"].core.io.send("a", bytes(100_000))   # b's queue: 0.5 s of frames and more
    net.run(until=1.3)   # the first has left (three flights, two round trips), the second is going
    net.crash("b")
    assert net.in_flight == 1                 # one propagating; the one being sent and the queued ones are gone
    net.run(until=4)
    assert len(net.nodes["a"].core.got) == 0  # both belonged to a connection that is gone
    assert net.in_flight == 0
    assert [p for _, p in net.nodes["a"].core.downs] == ["b"]
    disconnects = [e for e in net.nodes["a"].events if e["type"] == "disconnect"]
    assert disconnects[0]["reason"] == "peer crashed"
    net.restart("b")
    restarted = net.now
    net.run(until=restarted + 5)
    # a dialled b: it keeps redialling (backoff up to 2 s) and the link is back, new core on b's side
    (t_up, peer), = [u for u in net.nodes["a"].core.ups if u[0] > restarted]
    assert peer == "b" and t_up <= restarted + 2.0 + 0.05 + 1e-9
    assert sorted(p for _, p in net.nodes["b"].core.ups) == ["a", "c"]   # a fresh core: both redialled it
    net.nodes["b"].core.io.send("a", b"hi")
    net.run(until=net.now + 1)
    assert net.nodes["a"].core.got[-1][2] == b"hi"


def test_a_disconnect_stops_the_redial():
    net = pair()
    net.disconnect("a", "b")
    net.run(until=5)
    assert frozenset(("a", "b")) not in net.links
    assert [p for _, p in net.nodes["b"].core.downs] == ["a"]


def test_a_new_download_rate_applies_from_the_change_and_keeps_each_connections_order():
    """A degrade that changes b's download rate: what was queued drained at the old rate until then,
    the rest at the new one; a frame sent after the change never overtakes one sent before it."""
    net = _queue_at_b(1_000_000, 1.0)           # 1 MB queued, draining at 1 MB/s
    net.run(until=1.9)                           # 100 KB left
    net.degrade("b", bandwidth=(8 * MBIT, 0.8 * MBIT))   # 0.1 MB/s from now on
    net.nodes["a"].core.io.send("b", bytes(100))
    net.run(until=20)
    # at b at 1.95 s behind the 95 KB left then, which take 0.95 s at the new rate
    assert arrivals(net) == pytest.approx([1.95 + (95_000 + wire_bytes(100)) / 100_000], abs=0.002)

    faster = _queue_at_b(500_000, 1.0)
    io = faster.nodes["a"].core.io
    io.send("b", bytes(1_000))                  # through b's queue at about 1.5 s
    faster.run(until=1.06)
    faster.degrade("b", bandwidth=(8 * MBIT, 800 * MBIT))
    io.send("b", bytes(2_000))                  # at b at 1.11 s, where the queue no longer holds it
    faster.run(until=5)
    assert [len(p) for _, _, p in faster.nodes["b"].core.got] == [1_000, 2_000]


def test_the_download_queue_is_the_emulations():
    """The simulated downlink holds what the emulation's downlink queue (tc.py's pfifo) holds."""
    from orchestrator.shaping.tc import QUEUE_PACKETS
    assert access_link.DOWNLINK_QUEUE_PACKETS == QUEUE_PACKETS
