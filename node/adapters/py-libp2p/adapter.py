"""peerlab node contract v1 (docs/node-contract.md) for py-libp2p's GossipSub.

    .tools/py-libp2p/bin/python adapter.py --config FILE

Reads the contract config, starts a py-libp2p host (TCP, Noise, Yamux, GossipSub) with the identity
derived from the config's seed, dials the planned peers, subscribes, publishes the schedule from T0
and writes the contract's events as JSON lines. SIGTERM stops it cleanly.

py-libp2p's defaults do not suit a testbed, so this adapter overrides them (and says so in
adapter.json): heartbeat 1 s (its default is 120 s), mesh degrees 6/5/12 (it has none), Noise only
(it also offers TLS, secio and plaintext), Yamux only, meshsub 1.2 at most (js-libp2p's and peerlab's
version; it also speaks 1.3, 1.4 and 2.0), and its additions that go-libp2p does not have switched
off: adaptive degrees and heartbeat, spam protection (stops forwarding above 10 msgs/s per peer
without a word) and IP-diversity grafting. D_lazy and gossip_factor, fixed at 6 and 0.25 in the
library, are made settable by replacing its one method that uses them.

Duplicates (with their sender) and per-RPC counts are logged by wrapping methods of the running
Pubsub object and the module's frame reader: private names, which is why requirements.txt pins
every version.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time

import multiaddr
import trio
from libp2p import create_yamux_muxer_option, new_host
from libp2p.abc import INotifee
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.pubsub import pubsub as pubsub_module
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.tools.anyio_service import background_trio_service

# peerlab's GossipSub names -> (py-libp2p's GossipSub argument, default used here)
ROUTER_ARGS = {
    "D": ("degree", 6), "D_lo": ("degree_low", 5), "D_hi": ("degree_high", 12),
    "heartbeat_interval": ("heartbeat_interval", 1.0), "fanout_ttl": ("time_to_live", 60),
    "history_length": ("gossip_history", 5), "history_gossip": ("gossip_window", 3),
    "prune_backoff": ("prune_back_off", 60), "unsubscribe_backoff": ("unsubscribe_back_off", 10),
}
GOSSIP_ARGS = {"D_lazy": 6, "gossip_factor": 0.25}     # made settable (see the module's docstring)
PUBSUB_ARGS = {"seen_ttl": ("seen_ttl", 120)}
FIXED = {"flood_publish": False}                       # what the library does and cannot change
DIAL_ATTEMPTS = 20


class EventLog:
    def __init__(self, path: str, node: str):
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
        self.node = node

    def emit(self, type_: str, **fields) -> None:
        self.file.write(json.dumps({"ts": time.time_ns(), "node": self.node, "type": type_, **fields},
                                   separators=(",", ":")) + "\n")


def message_id(msg: rpc_pb2.Message) -> bytes:
    """libp2p's default id, from || seqno (go-libp2p-pubsub's DefaultMsgIdFn; js-libp2p's under
    StrictSign; py-libp2p's message cache keys messages by it whatever id function it is given)."""
    return msg.from_id + msg.seqno


def label(msg: rpc_pb2.Message) -> bytes:
    """The message's name in the event log: the payload up to its first newline (the contract's payload
    format), the same in every implementation whatever ids travel on the wire."""
    return msg.data.split(b"\n", 1)[0]


def counts(rpc: rpc_pb2.RPC) -> dict:
    """The contract's counts: message ids announced (ihave, iwant, idontwant), topics (graft, prune)."""
    c = rpc.control
    ids = lambda entries: sum(len(e.messageIDs) for e in entries)  # noqa: E731
    return {"data_bytes": sum(len(m.data) for m in rpc.publish), "msgs": len(rpc.publish),
            "subs": len(rpc.subscriptions), "ihave": ids(c.ihave), "iwant": ids(c.iwant),
            "idontwant": ids(c.idontwant), "graft": len(c.graft), "prune": len(c.prune)}


def router_and_pubsub_args(params: dict) -> tuple[dict, dict, dict]:
    unknown = sorted(set(params) - set(ROUTER_ARGS) - set(GOSSIP_ARGS) - set(PUBSUB_ARGS) - set(FIXED))
    if unknown:
        taken = [*ROUTER_ARGS, *GOSSIP_ARGS, *PUBSUB_ARGS, *FIXED]
        sys.exit(f"py-libp2p adapter: no parameter {', '.join(unknown)} (it takes: {', '.join(taken)})")
    for name, value in FIXED.items():
        if name in params and params[name] != value:
            sys.exit(f"py-libp2p adapter: {name} is always {value} in py-libp2p")
    router = {arg: params.get(name, default) for name, (arg, default) in ROUTER_ARGS.items()}
    gossip = {name: params.get(name, default) for name, default in GOSSIP_ARGS.items()}
    pubsub = {arg: params.get(name, default) for name, (arg, default) in PUBSUB_ARGS.items()}
    return router, gossip, pubsub


class Node:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.log = EventLog(cfg["event_log"], cfg["node_id"])
        self.node_of = {pid: node for node, pid in cfg["peer_ids"].items()}
        self.key_pair = create_new_key_pair(bytes.fromhex(cfg["identity_seed"]))
        router, self.gossip, pubsub = router_and_pubsub_args(cfg["params"])
        noise = NoiseTransport(self.key_pair, noise_privkey=create_x25519_key_pair().private_key)
        self.host = new_host(key_pair=self.key_pair, sec_opt={NOISE_PROTOCOL_ID: noise},
                             muxer_opt={k: v for k, v in create_yamux_muxer_option().items() if "yamux" in k})
        if self.host.get_id().to_base58() != cfg["peer_ids"][cfg["node_id"]]:
            sys.exit(f"py-libp2p adapter: peer id {self.host.get_id()} is not the planned "
                     f"{cfg['peer_ids'][cfg['node_id']]} (identity_seed)")
        self.router = GossipSub(protocols=[PROTOCOL_ID_V12, PROTOCOL_ID_V11, PROTOCOL_ID], **router,
                                adaptive_gossip_enabled=False, spam_protection_enabled=False,
                                eclipse_protection_enabled=False)
        self.router._get_adaptive_gossip_peers_count = self._gossip_count
        self.pubsub = Pubsub(self.host, self.router, msg_id_constructor=message_id, **pubsub)
        self.delivered: set[bytes] = set()
        self.open: dict[str, int] = {}
        self.stopping = False
        self._wrap()

    def name(self, peer: ID | bytes | str) -> str:
        if isinstance(peer, bytes):
            peer = ID(peer)
        text = peer.to_base58() if isinstance(peer, ID) else peer
        return self.node_of.get(text, text)

    def _gossip_count(self, topic: str, eligible: int) -> int:
        return max(self.gossip["D_lazy"], int(eligible * self.gossip["gossip_factor"]))

    # first copies, duplicates (with their sender), RPC counts -------------------------------------
    def _wrap(self) -> None:
        pubsub, emit, me = self.pubsub, self.log.emit, self.host.get_id()
        push = pubsub.push_msg

        async def push_msg(forwarder: ID, msg: rpc_pb2.Message) -> None:
            if forwarder != me:
                msg_id = label(msg)
                fields = {"topic": msg.topicIDs[0] if msg.topicIDs else "", "msg_id": msg_id.decode(errors="replace"),
                          "peer": self.name(forwarder), "size": len(msg.data)}
                if msg_id in self.delivered:
                    emit("duplicate_message", **fields)
                else:
                    self.delivered.add(msg_id)  # before any await: a copy arriving meanwhile is a duplicate
                    emit("deliver_message", origin=self.name(msg.from_id), **fields)
            await push(forwarder, msg)
        pubsub.push_msg = push_msg

        write = pubsub.write_msg

        async def write_msg(stream, rpc: rpc_pb2.RPC) -> bool:
            sent = await write(stream, rpc)
            if sent:
                emit("send_rpc", peer=self.name(stream.muxed_conn.peer_id), bytes=rpc.ByteSize(), **counts(rpc))
            return sent
        pubsub.write_msg = write_msg

        read = pubsub_module.read_varint_prefixed_bytes_limited

        async def read_rpc(stream, limit):
            frame = await read(stream, limit)
            if stream.muxed_conn.peer_id is not None:
                rpc = rpc_pb2.RPC()
                rpc.ParseFromString(frame)
                emit("recv_rpc", peer=self.name(stream.muxed_conn.peer_id), bytes=len(frame), **counts(rpc))
            return frame
        pubsub_module.read_varint_prefixed_bytes_limited = read_rpc

    # connections: one connect per peer (libp2p may hold several connections to it) ----------------
    def connected(self, conn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        self.open[peer] = self.open.get(peer, 0) + 1
        if self.open[peer] == 1:
            self.log.emit("connect", peer=self.name(peer), outbound=bool(getattr(conn.muxed_conn, "is_initiator", False)))

    def disconnected(self, conn) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        left = self.open.get(peer, 1) - 1
        if left > 0:
            self.open[peer] = left
            return
        self.open.pop(peer, None)
        self.log.emit("disconnect", peer=self.name(peer), reason="closed")

    # the run --------------------------------------------------------------------------------------
    async def run(self) -> None:
        cfg, emit = self.cfg, self.log.emit
        listen = multiaddr.Multiaddr(f"/ip4/{cfg['listen']['host']}/tcp/{cfg['listen']['port']}")
        self.host.get_network().register_notifee(Connections(self))
        async with self.host.run(listen_addrs=[listen]), trio.open_nursery() as nursery:
            nursery.start_soon(self._signals, nursery)
            async with background_trio_service(self.pubsub), background_trio_service(self.router):
                await self.pubsub.wait_until_ready()
                emit("start", protocol=cfg["protocol"])
                emit("behaviour", behaviour="honest")
                for topic in cfg["subscriptions"]:
                    nursery.start_soon(self._drain, await self.pubsub.subscribe(topic))
                    emit("join", topic=topic)
                emit("t0", t0=cfg["t0_ns"])
                t0 = cfg["t0_ns"] / 1e9
                for index, (offset, topic, size) in enumerate(cfg["schedule"]):
                    if t0 + offset >= time.time():  # a restarted node skips what it missed
                        nursery.start_soon(self._publish_at, t0 + offset, index + 1, topic, size)
                for offset, topic in cfg["late_subscriptions"]:
                    nursery.start_soon(self._subscribe_at, t0 + offset, topic)
                for node in cfg["dial"]:
                    nursery.start_soon(self._dial, node)
                if cfg.get("resources_interval", 1) > 0:
                    nursery.start_soon(self._resources, cfg.get("resources_interval", 1))
                emit("ready")
                await trio.sleep_forever()

    async def _publish_at(self, when: float, seq: int, topic: str, size: int) -> None:
        await trio.sleep(max(0.0, when - time.time()))
        msg_id = f"{self.cfg['node_id']}-{seq}".encode()  # unique across restarts: the schedule is the same
        data = msg_id + b"\n" + os.urandom(max(0, size - len(msg_id) - 1))
        self.log.emit("publish_message", topic=topic, msg_id=msg_id.decode(), size=len(data), seq=seq)
        self.delivered.add(msg_id)
        try:
            await self.pubsub.publish(topic, data)
        except Exception as err:  # noqa: BLE001 - the library's refusal, whatever its class, is the event
            self.log.emit("publish_refused", topic=topic, msg_id=msg_id.decode(), reason=f"{err.__class__.__name__}: {err}")

    async def _subscribe_at(self, when: float, topic: str) -> None:
        await trio.sleep(max(0.0, when - time.time()))
        subscription = await self.pubsub.subscribe(topic)
        self.log.emit("join", topic=topic)
        await self._drain(subscription)

    async def _drain(self, subscription) -> None:
        """Deliveries are logged where they arrive (push_msg); the subscription's queue is emptied so
        that it never fills."""
        async for _ in subscription:
            pass

    async def _dial(self, node: str) -> None:
        """A peer not up yet is retried (it may start later or be restarting)."""
        peer = self.cfg["peers"][node]
        info = PeerInfo(ID.from_base58(peer["peer_id"]), [multiaddr.Multiaddr(f"/ip4/{peer['host']}/tcp/{peer['port']}")])
        for attempt in range(DIAL_ATTEMPTS):
            try:
                await self.host.connect(info)
                return
            except Exception as err:  # noqa: BLE001 (any failure to connect is retried, then reported)
                last = err
                await trio.sleep(min(2.0, 0.1 * 2 ** attempt))
        print(f"dial {node}: {last}", file=sys.stderr)

    async def _resources(self, interval: float) -> None:
        """The process's CPU time and resident memory, every resources_interval seconds (as peerlab's node)."""
        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            with open("/proc/self/statm") as statm:
                rss = int(statm.read().split()[1]) * page
            self.log.emit("resources", cpu_s=usage.ru_utime + usage.ru_stime, rss_bytes=rss)
            await trio.sleep(interval)

    async def _signals(self, nursery) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.log.emit("stop", reason=signal.Signals(signum).name)
                self.log.file.flush()
                # a clean libp2p shutdown can wait on peers; the stop is logged, so a few seconds at most
                with trio.move_on_after(3):
                    await self.host.close()
                os._exit(0)


class Connections(INotifee):
    def __init__(self, node: Node):
        self.node = node

    async def connected(self, network, conn) -> None:
        self.node.connected(conn)

    async def disconnected(self, network, conn) -> None:
        self.node.disconnected(conn)

    async def opened_stream(self, network, stream) -> None:
        pass

    async def closed_stream(self, network, stream) -> None:
        pass

    async def listen(self, network, multiaddr) -> None:
        pass

    async def listen_close(self, network, multiaddr) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description="py-libp2p GossipSub as a peerlab node (contract v1)")
    parser.add_argument("--config", required=True, help="the contract config (JSON) the runner wrote")
    args = parser.parse_args()
    with open(args.config) as file:
        cfg = json.load(file)
    if cfg.get("contract") != 1:
        sys.exit(f"adapter speaks contract 1, the config is contract {cfg.get('contract')}")
    trio.run(Node(cfg).run)


if __name__ == "__main__":
    main()
