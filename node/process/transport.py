"""The node's TCP data plane: listener, dialers with reconnect, identity handshake, and one send
queue per peer.

In transport-latency mode (kernels without sch_netem) each frame is held in its peer's queue until
`now + delay (+ jitter)` before it is written; release times never go backwards, so a stream keeps
its order, and bandwidth is still enforced by the kernel's HTB below.
"""
from __future__ import annotations

import asyncio
import logging
import random
import socket
import sys
from collections import deque
from typing import Callable, NamedTuple

from node.framing import DecodeError, Frame, FrameDecoder, FrameTooLarge, Hello, encode_frame
from node.linkmodel import DIAL_BACKOFF_FIRST, DIAL_TIMEOUT, REDIAL_AFTER_CLOSE, next_backoff, release_time

log = logging.getLogger("node.process.transport")
READ_CHUNK = 256 * 1024
# The socket's receive low-water mark is raised to the bytes a large frame still lacks (at most
# this), so the loop wakes once per frame, not once per TCP segment: a 50 KB message is 35 segments,
# each a wake-up, a read and a decoder pass (about 2 ms of CPU a copy when a dilated or slow link
# spaces them out, 50 nodes on 2 cores then starve each other). Not more than 16 KB: bytes waiting
# unread shrink the receive window, and a mark near it would stall the sender. Within one segment
# of the frame's end the mark stays at 1 byte (the next segment completes it anyway).
MAX_LOWAT = 16 * 1024
SEGMENT = 1448
# Frames are handed to the kernel one at a time, each when the kernel holds less than this of the
# connection's bytes not yet sent (TCP_NOTSENT_LOWAT; the asyncio buffer must be empty too). Without
# it the kernel's send buffer, which autotuning grows to megabytes, took every queued frame at once
# (up to 384 KB unsent per connection in a 30-publisher GossipSub run), and an IDONTWANT queued on the
# priority lane waited behind all of them instead of overtaking them: half the IDONTWANT savings the
# simulator counts, which holds frames in the node until the one before has left, as this does.
SEND_LOWAT = 16 * 1024
TCPI_BYTES_ACKED = 120  # offset of tcpi_bytes_acked (u64) in Linux's struct tcp_info


class TransportEvents(NamedTuple):
    """What the transport reports to the node that owns it."""
    peer_up: Callable[[str, bool], None]  # the peer, and whether this node dialled it
    peer_down: Callable[[str, str], None]  # the peer, and why
    frame: Callable[[str, Frame], None]


class PeerConnection:
    def __init__(self, transport: "Transport", peer: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, outbound: bool):
        self.transport = transport
        self.peer = peer
        self.reader = reader
        self.writer = writer
        self.outbound = outbound
        self._queue: deque[tuple[float, bytes]] = deque()
        self._priority: deque[tuple[float, bytes]] = deque()  # small control frames that must not wait
        self._queued_bytes = 0
        self._wakeup = asyncio.Event()
        self._last_release = 0.0
        self.closed = False
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, SEND_LOWAT)
        writer.transport.set_write_buffer_limits(high=0)  # drain() returns once the kernel took it all

    def send(self, frame: Frame, priority: bool = False) -> bool:
        """Queue a frame; False if the queue is over its byte limit (the frame is dropped). Priority
        frames (e.g. IDONTWANT) go out before queued normal frames, not behind them."""
        data = encode_frame(frame)
        if self._queued_bytes + len(data) > self.transport.queue_limit:
            return False
        t = self.transport
        release = release_time(asyncio.get_running_loop().time(), t.delay_to(self.peer), t.jitter_to(self.peer), t.rng,
                               self._last_release)
        self._last_release = release
        (self._priority if priority else self._queue).append((release, data))
        self._queued_bytes += len(data)
        self._wakeup.set()
        return True

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def _next_due(self, now: float) -> tuple[deque[tuple[float, bytes]], float]:
        """The lane to write from next, and how long until its head is due. A due priority frame goes
        first; a normal frame that is due goes before a priority frame that is not: the priority lane
        overtakes frames waiting to be written, it never holds back the other lane (it did: each new
        IDONTWANT, due 100 ms later, kept every due message waiting behind it)."""
        lanes = [lane for lane in (self._priority, self._queue) if lane]
        for lane in lanes:
            if lane[0][0] <= now:
                return lane, 0.0
        first = min(lanes, key=lambda lane: lane[0][0])
        return first, first[0][0] - now

    async def write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.closed:
            if not self._queue and not self._priority:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            queue, wait = self._next_due(loop.time())
            if wait > 0:
                self._wakeup.clear()
                try:  # a priority frame arriving meanwhile is written first
                    await asyncio.wait_for(self._wakeup.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                continue
            _, data = queue.popleft()
            self._queued_bytes -= len(data)
            self.writer.write(data)
            await self.writer.drain()

    async def read_loop(self, decoder: FrameDecoder, pending: list[Frame]) -> None:
        for frame in pending:
            self.transport.events.frame(self.peer, frame)
        sock = self.writer.get_extra_info("socket")
        lowat = 1
        while True:
            data = await self.reader.read(READ_CHUNK)
            if not data:
                return
            for frame in decoder.feed(data):
                self.transport.events.frame(self.peer, frame)
            missing = decoder.missing()
            want = min(missing, MAX_LOWAT) if missing > SEGMENT else 1
            if want != lowat and sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)
                lowat = want

    def close(self) -> None:
        self.closed = True
        self._wakeup.set()
        self.writer.close()


class Transport:
    """Owns every data connection of one node and reports peers up/down and frames to the runtime."""

    def __init__(self, node_id: str, run_id: str, protocol: str, *, delays_ms: dict[str, float],
                 jitter_ms: float, max_frame: int, queue_limit: int, rng: random.Random, events: TransportEvents,
                 time_scale: float = 1.0):
        """`time_scale`: real seconds per second of the node's dial timers (a dilated run's factor;
        delays and jitter are given in real ms already)."""
        self.node_id = node_id
        self.hello = Frame(hello=Hello(node_id=node_id, protocol=protocol, run_id=run_id))
        self.run_id = run_id
        self.delays = {p: d / 1000 for p, d in delays_ms.items()}
        self.extra_delays: dict[str, float] = {}  # a degraded link's added latency (fault timeline)
        self.extra_jitters: dict[str, float] = {}  # ... and its added jitter
        self.jitter = jitter_ms / 1000
        self.max_frame = max_frame
        self.queue_limit = queue_limit
        self.rng = rng
        self.events = events
        self.time_scale = time_scale
        self.connections: dict[str, PeerConnection] = {}
        self._dialers: dict[str, asyncio.Task] = {}  # peers we keep a connection to (redialled if lost)
        self._replacing: set[str] = set()  # peers whose connection is being replaced by a newer one
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.AbstractServer | None = None
        self._stopping = False

    async def listen(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accepted, host, port, backlog=1024)

    def dial(self, peer: str, host: str, port: int) -> None:
        """Keep a connection to `peer` until `disconnect(peer)`: dial, and dial again if it drops."""
        dialer = self._dialers.get(peer)
        if dialer is None or dialer.done():
            self._dialers[peer] = self._spawn(self._dial_loop(peer, host, port))

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _dial_loop(self, peer: str, host: str, port: int) -> None:
        backoff = DIAL_BACKOFF_FIRST
        while not self._stopping:
            if peer in self.connections:  # it dialled us first: the link exists, both ways
                await asyncio.sleep(0.5 * self.time_scale)
                continue
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                        DIAL_TIMEOUT * self.time_scale)
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(backoff * self.time_scale)
                backoff = next_backoff(backoff)
                continue
            backoff = DIAL_BACKOFF_FIRST
            await self._run_connection(reader, writer, outbound=True, expected=peer)
            if not self._stopping:
                # jittered, so that nodes that lost their links at once do not redial in step
                await asyncio.sleep(REDIAL_AFTER_CLOSE * random.uniform(1.0, 3.0) * self.time_scale)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await self._run_connection(reader, writer, outbound=False, expected=None)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                         ) -> tuple[Hello | None, FrameDecoder, list[Frame]]:
        """Exchange Hello frames; returns the peer's hello, and the decoder with what followed it."""
        writer.write(encode_frame(self.hello))
        await writer.drain()
        decoder = FrameDecoder(self.max_frame)
        while True:
            data = await reader.read(4096)
            if not data:
                return None, decoder, []
            frames = decoder.feed(data)
            if frames:
                first = frames[0]
                if first.WhichOneof("body") != "hello" or first.hello.run_id != self.run_id:
                    return None, decoder, []
                return first.hello, decoder, frames[1:]

    async def _run_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                              outbound: bool, expected: str | None) -> None:
        try:
            hello, decoder, pending = await asyncio.wait_for(self._handshake(reader, writer), 10)
        except (OSError, asyncio.TimeoutError, DecodeError, FrameTooLarge):
            hello, decoder, pending = None, None, []
        peer = hello.node_id if hello else None
        if peer is None or (expected and peer != expected) or self._stopping:
            writer.close()
            return
        existing = self.connections.get(peer)
        if existing is not None:
            if not self._replaces(existing, outbound, peer):
                writer.close()
                return
            existing.close()  # (its read loop ends; it is no longer registered, so no second peer_down)
            del self.connections[peer]
            # the core hears the link go down and come up (what it sent on the old one may be lost, and a
            # restarted peer needs its state again); a disconnect it asks for in between, as the DHT
            # cores' on-demand links do on every peer_down, would drop the link that replaces this one
            self._replacing.add(peer)
            try:
                self.events.peer_down(peer, "replaced by a newer connection")
            finally:
                self._replacing.discard(peer)
        conn = PeerConnection(self, peer, reader, writer, outbound)
        self.connections[peer] = conn
        self.events.peer_up(peer, outbound)
        writer_task = self._spawn(conn.write_loop())
        reason = "closed by peer"
        try:
            await conn.read_loop(decoder, pending)
        except FrameTooLarge as err:
            reason = f"oversized frame: {err}"
        except DecodeError:
            reason = "malformed frame"
        except (OSError, asyncio.IncompleteReadError) as err:
            reason = f"connection error: {err.__class__.__name__}"
        except asyncio.CancelledError:
            reason = "node stopping"
            raise
        finally:
            writer_task.cancel()
            conn.close()
            if self.connections.get(peer) is conn:
                del self.connections[peer]
                self.events.peer_down(peer, reason)

    def _replaces(self, existing: PeerConnection, outbound: bool, peer: str) -> bool:
        """Whether a new connection to `peer` takes the place of `existing`. Both ends decide alike, so
        they keep the same one: a redial by the side that dialled the existing connection (it lost that
        one: a restart, a reset) replaces it; of two dialled at once, one by each side, the connection
        the lower node id dialled stays (each end keeping its own and refusing the other's lost both)."""
        dialer_new = self.node_id if outbound else peer
        dialer_old = self.node_id if existing.outbound else peer
        return dialer_new == dialer_old or dialer_new == min(self.node_id, peer)

    def delay_to(self, peer: str) -> float:
        """Seconds a frame to `peer` is held: the planned latency plus any degradation."""
        return self.delays.get(peer, 0.0) + self.extra_delays.get(peer, 0.0)

    def jitter_to(self, peer: str) -> float:
        """The jitter (s) of a frame to `peer`: the planned jitter plus any degradation's."""
        return self.jitter + self.extra_jitters.get(peer, 0.0)

    def degrade(self, peer: str, extra_s: float, extra_jitter_s: float = 0.0) -> None:
        """Add `extra_s` to the latency towards `peer` and `extra_jitter_s` to its jitter (zeros restore
        them); frames queued keep their time."""
        for extras, value in ((self.extra_delays, extra_s), (self.extra_jitters, extra_jitter_s)):
            if value:
                extras[peer] = value
            else:
                extras.pop(peer, None)

    def send(self, peer: str, frame: Frame, priority: bool = False) -> str | None:
        """Queue a frame to `peer`; returns None, or why it was not queued."""
        conn = self.connections.get(peer)
        if conn is None:
            return "not connected"
        if not conn.send(frame, priority):
            return "send queue full"
        return None

    def peer_ip(self, peer: str) -> str | None:
        conn = self.connections.get(peer)
        name = conn.writer.get_extra_info("peername") if conn else None
        return name[0] if name else None

    def backlog(self, peer: str) -> int:
        conn = self.connections.get(peer)
        if conn is None:
            return 0
        return conn.queued_bytes + conn.writer.transport.get_write_buffer_size()

    def bytes_acked(self, peer: str) -> int | None:
        """What the kernel counts as acknowledged by `peer` on this connection (tcp_info's
        bytes_acked: payload bytes, plus one for the SYN), None if not connected."""
        conn = self.connections.get(peer)
        sock = conn.writer.get_extra_info("socket") if conn else None
        if sock is None:
            return None
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCPI_BYTES_ACKED + 8)
        return int.from_bytes(info[TCPI_BYTES_ACKED:TCPI_BYTES_ACKED + 8], sys.byteorder)

    def disconnect(self, peer: str) -> None:
        """Close the connection to `peer` and stop redialling it (not while its connection is being
        replaced: the link stays; see _run_connection)."""
        if peer in self._replacing:
            return
        dialer = self._dialers.pop(peer, None)
        if dialer is not None:
            dialer.cancel()
        conn = self.connections.get(peer)
        if conn:
            conn.close()

    async def close(self) -> None:
        self._stopping = True
        if self._server:
            self._server.close()
        for conn in list(self.connections.values()):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
