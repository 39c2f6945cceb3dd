"""The asyncio driver: runs one sans-IO protocol core over the TCP transport, executes the node's
publish schedule from T0, answers calibration probes, and writes the event log."""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import time
import traceback
from typing import Any

from node import behaviours
from node.config import NodeConfig
from node.dilation import Dilation, clock_shift
from node.eventlog import EventLog
from node.framing import Frame, Probe
from node.identity import Identities
from node.ids import node_id
from node.lifecycle import NodeLifecycle, NodeRandomness
from node.linkmodel import Degradations
from node.process.looplag import LoopLag
from node.process.transport import Transport, TransportEvents
from node.protocols import get_protocol

log = logging.getLogger("node")
BULK_CHUNK = 64 * 1024
BULK_POLL_S = 0.002  # real seconds between readings of the bytes a throughput probe's peer acknowledged


class NodeRuntime:
    def __init__(self, cfg: NodeConfig):
        self.cfg = cfg
        self.node_id = cfg.node_id
        rngs = NodeRandomness.of(cfg.seed, cfg.node_id)
        self.rng = rngs.life  # (and the loss of a degraded link, below)
        # every time of this node (core clock, timers, schedule, event log, probes) is experiment time
        self.dilation = Dilation(cfg.dilation, cfg.dilation_epoch_ns, clock_shift())
        self.events = EventLog.open(cfg.node_id, cfg.event_log, clock_ns=self.dilation.time_ns)
        core_cls = get_protocol(cfg.protocol)
        self._directory = {p: frozenset(t) for p, t in cfg.directory.items()}
        self._identities = Identities(cfg.seed, lambda: [*map(node_id, range(cfg.nodes)), *cfg.peers])
        self.core = behaviours.build(
            core_cls, cfg.node_id, core_cls.Params(**cfg.params), self, self.dilation.monotonic,
            rngs.core, cfg.behaviour,
            lambda delay, fn: asyncio.get_running_loop().call_later(self.dilation.real(delay), self.guard, fn))
        self.transport = Transport(
            cfg.node_id, cfg.run_id, cfg.protocol, delays_ms=cfg.delays_ms, jitter_ms=cfg.jitter_ms,
            max_frame=cfg.max_frame, queue_limit=cfg.send_queue_limit, rng=rngs.transport,
            time_scale=self.dilation.factor,
            events=TransportEvents(peer_up=self._peer_up, peer_down=self._peer_down, frame=self._frame))
        self.life = NodeLifecycle(cfg.node_id, cfg, self, self.rng)
        self.t0_ns: int | None = None
        self.delivered = 0
        self.state = "init"
        self.stopped = asyncio.Event()
        self._nonce = itertools.count(1)
        self._pings: dict[int, asyncio.Future] = {}
        self.link_loss: dict[str, float] = {}  # degraded links (fault timeline): loss towards the peer
        self._degraded = Degradations()
        self.loop_lag = LoopLag(LoopLag.tick_for(cfg.nodes), dilation=self.dilation.factor)  # how late this loop wakes (GET /loop_lag)

    # ProtocolIO ----------------------------------------------------------------------------------
    def send(self, peer: str, payload: bytes, priority: bool = False) -> None:
        loss = self.link_loss.get(peer, self.cfg.loss)
        if loss and self.rng.random() < loss:
            self.trace("drop_rpc", peer=peer, bytes=len(payload), reason="emulated loss")
            return
        why = self.transport.send(peer, Frame(rpc=payload), priority)
        if why:
            self.trace("drop_rpc", peer=peer, bytes=len(payload), reason=why)

    def connect(self, peer: str) -> None:
        addr = self.cfg.peers.get(peer)
        if addr and peer not in self.transport.connections:
            self.transport.dial(peer, addr.host, addr.port)

    def disconnect(self, peer: str) -> None:
        self.transport.disconnect(peer)

    def set_timer(self, delay: float, name: str, data: Any = None) -> Any:
        return asyncio.get_running_loop().call_later(self.dilation.real(delay), self.guard, self.core.on_timer,
                                                     name, data)

    def cancel_timer(self, handle: Any) -> None:
        handle.cancel()

    def deliver(self, topic: str, msg_id: str, data: bytes, origin: str) -> None:
        self.delivered += 1

    def trace(self, type_: str, **fields: Any) -> None:
        self.events.emit(type_, **fields)

    def peer_ip(self, peer: str) -> str | None:
        return self.transport.peer_ip(peer)

    def backlog(self, peer: str) -> int:
        return self.transport.backlog(peer)

    def directory(self) -> dict[str, frozenset[str]]:
        return self._directory

    def identities(self) -> Identities:
        return self._identities

    # NodeHost (node/lifecycle.py) ----------------------------------------------------------------
    def guard(self, fn, *args: Any) -> Any:
        """Run a core input; a bug in a core is reported on stderr but does not kill the node."""
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - keep the node alive, report loudly
            traceback.print_exc(file=sys.stderr)
            return None

    def call_at(self, when: float, fn, *args: Any) -> asyncio.TimerHandle:
        """`when` on the node's clock (T0's), armed on the loop's monotonic clock."""
        wait = self.dilation.real(max(0.0, when - self.clock()))
        return asyncio.get_running_loop().call_later(wait, self.guard, fn, *args)

    def cancel(self, handle: asyncio.TimerHandle) -> None:
        handle.cancel()

    def clock(self) -> float:
        return self.dilation.time()

    @property
    def published(self) -> int:
        return self.life.published

    # transport callbacks -------------------------------------------------------------------------

    def _peer_up(self, peer: str, outbound: bool) -> None:
        self.trace("connect", peer=peer, outbound=outbound)
        self.guard(self.core.on_peer_up, peer, outbound)

    def _peer_down(self, peer: str, reason: str) -> None:
        self.trace("disconnect", peer=peer, reason=reason)
        self.guard(self.core.on_peer_down, peer)

    def _frame(self, peer: str, frame: Frame) -> None:
        kind = frame.WhichOneof("body")
        if kind == "rpc":
            self.guard(self.core.on_frame, peer, frame.rpc)
        elif kind == "probe":
            self._probe(peer, frame.probe)

    # lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        from node.process.control import serve_control  # aiohttp is imported only where it is used

        await self.transport.listen(self.cfg.listen.host, self.cfg.listen.port)
        control = await serve_control(self)
        self.life.announce()
        self.guard(self.core.on_start)
        self.life.join()
        self.state = "ready"
        self.trace("ready")
        if self.cfg.t0_ns is not None:  # given in the config (the contract's way), not by POST /start
            self.start(self.cfg.t0_ns)
        sampler = asyncio.create_task(self._sample_resources()) if self.cfg.resources_interval else None
        # PEERLAB_FIDELITY=0 (the orchestrator's switch, inherited on the local backend): no ticking
        lag = asyncio.create_task(self.loop_lag.run()) if os.environ.get("PEERLAB_FIDELITY") != "0" else None
        try:
            await self.stopped.wait()
        finally:
            if lag:
                lag.cancel()
            if sampler:
                sampler.cancel()
            self.life.disarm()
            await self.transport.close()
            await control.cleanup()
            self.events.close()

    async def _sample_resources(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page
            self.trace("resources", cpu_s=round(time.process_time(), 4), rss_bytes=rss)
            await asyncio.sleep(self.dilation.real(self.cfg.resources_interval))

    def stop(self, reason: str) -> None:
        if self.life.stop(reason):
            self.state = "stopped"
            self.stopped.set()
            # a probe waiting for its pong would hold the control API's shutdown (and the process) for
            # its timeout, k times longer in a dilated run: its peers are stopping too, none will come
            for fut in self._pings.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"{self.node_id} stopped ({reason}) during the probe"))
            self._pings.clear()

    def start(self, t0_ns: int) -> int:
        """Arm the publish schedule and the timed subscriptions relative to T0; returns how many
        publishes were armed."""
        if self.t0_ns is not None:
            return 0
        self.t0_ns = t0_ns
        self.state = "running"
        return self.life.arm(t0_ns)

    def publish(self, topic: str, size: int) -> str:
        return self.life.publish(topic, size)

    def degrade(self, node: str, delay_ms: float, loss: float, jitter_ms: float = 0.0) -> None:
        """The fault timeline degrades (zeros: restores) `node`'s access link: this node itself (all its
        links) or one peer (the link to it). A link's added latency and jitter are the sums of its two
        ends', its loss their combination; all on top of the plan's, applied in this node's transport."""
        self._degraded.set(node, delay_ms / 1000, loss, jitter_ms / 1000)
        for peer in self.cfg.peers if node == self.node_id else [node]:
            self.transport.degrade(peer, self._degraded.added_delay(self.node_id, peer),
                                   self._degraded.added_jitter(self.node_id, peer))
            link_loss = self._degraded.loss(self.node_id, peer, self.cfg.loss)
            if link_loss > self.cfg.loss:
                self.link_loss[peer] = link_loss
            else:
                self.link_loss.pop(peer, None)
        # told in real ms, as shaping applies latency (orchestrator/model/dilation.py); logged in experiment ms
        self.trace("degrade", peer=node, delay_ms=self.dilation.experiment(float(delay_ms)), loss=float(loss),
                   jitter_ms=self.dilation.experiment(float(jitter_ms)))

    def status(self) -> dict[str, Any]:
        return {"node": self.node_id, "state": self.state, "protocol": self.cfg.protocol,
                "connected": sorted(self.transport.connections), "neighbours": self.cfg.neighbours,
                "t0": self.t0_ns, "published": self.published, "delivered": self.delivered,
                "core": self.core.status()}

    # calibration probes --------------------------------------------------------------------------
    def _probe(self, peer: str, probe: Probe) -> None:
        if probe.kind == Probe.PING:
            self.transport.send(peer, Frame(probe=Probe(kind=Probe.PONG, nonce=probe.nonce)))
        elif probe.kind == Probe.PONG:
            fut = self._pings.pop(probe.nonce, None)
            if fut and not fut.done():
                fut.set_result(self.dilation.monotonic())
        # BULK: throughput payload, measured by its sender (throughput below); nothing to answer

    async def ping(self, peer: str, count: int, timeout: float = 5.0) -> list[float]:
        """Round-trip times (ms) of `count` probes over the data connection to `peer`."""
        loop = asyncio.get_running_loop()
        rtts = []
        for _ in range(count):
            nonce = next(self._nonce)
            fut = self._pings[nonce] = loop.create_future()
            sent = self.dilation.monotonic()
            if self.transport.send(peer, Frame(probe=Probe(kind=Probe.PING, nonce=nonce))):
                raise ConnectionError(f"{self.node_id} is not connected to {peer}")
            rtts.append((await asyncio.wait_for(fut, self.dilation.real(timeout)) - sent) * 1000)
        return rtts

    async def throughput(self, peer: str, nbytes: int, timeout: float = 60.0) -> float:
        """Send `nbytes` of probe payload to `peer`; the rate the link delivered it at, Mbit/s, from
        the first quarter on (TCP's slow start left out).

        Measured at the sender, from the kernel's count of bytes the peer acknowledged, read every
        BULK_POLL_S with the time of the reading: each pair is what had arrived by then, however late
        this loop reads it, so a busy host can only lengthen the span. Timed at the receiver as frames
        were read, a receiver that stalled across the mark then read its backlog at once and counted
        bytes that had arrived before the mark as after it (79.8 Mbit/s on a 50 Mbit/s link)."""
        base = self.transport.bytes_acked(peer)
        if base is None:
            raise ConnectionError(f"{self.node_id} is not connected to {peer}")
        chunk = bytes(BULK_CHUNK)
        for sent in range(0, nbytes, BULK_CHUNK):
            probe = Probe(kind=Probe.BULK, payload=chunk[:min(BULK_CHUNK, nbytes - sent)])
            if self.transport.send(peer, Frame(probe=probe)):
                raise ConnectionError(f"{self.node_id} is not connected to {peer}")
        deadline = time.monotonic() + self.dilation.real(timeout)
        before = (self.dilation.monotonic_ns(), 0)  # the last reading: (when, bytes acknowledged)
        mark: tuple[int, int] | None = None
        while True:
            await asyncio.sleep(BULK_POLL_S)
            acked, now = self.transport.bytes_acked(peer), self.dilation.monotonic_ns()
            if acked is None:
                raise ConnectionError(f"{self.node_id} lost its connection to {peer} during the probe")
            acked -= base
            if mark is None and acked >= nbytes // 4:
                # the reading before, if this one already has it all (a probe quicker than a poll)
                mark = (now, acked) if acked < nbytes else before
            if mark is not None and acked >= nbytes:
                return (acked - mark[1]) * 8 / (now - mark[0]) * 1000
            before = (now, acked)
            if time.monotonic() > deadline:
                raise asyncio.TimeoutError(f"{acked} of {nbytes} probe bytes acknowledged by {peer}")
