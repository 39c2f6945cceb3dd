"""Fuzzing every wire decoder a node exposes to its peers (`peerlab fuzz`).

Targets: `frame` (the stream framing: varint length + protobuf Frame, fed in random chunks), `rpc`
(the libp2p pubsub RPC decoder), and `core:<protocol>` for every protocol core (a live core in the
in-memory network gets each input as a frame from a connected peer: its own decoding, fragments,
control handling and state all run). A *crash* is any exception other than the decoder's documented
refusal (`DecodeError`, `FrameTooLarge`); cores must refuse silently.

Engines: atheris (coverage-guided libFuzzer) when it is installed, else hypothesis (seeded
generation: random bytes, and valid frames truncated, bit-flipped, spliced and length-lied).
Each target runs in its own process and prints `decoder=<name> frames=<n> crashes=<k>`.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

from node.framing import DecodeError, Frame, FrameDecoder, FrameTooLarge, Hello, Probe, encode_frame, encode_varint
from node.identity import Identities
from node.protocols import PROTOCOLS
from node.protocols.pubsub import wire
from node.protocols.pubsub.messages import MessageIds

Target = Callable[[bytes], None]
REFUSALS = (DecodeError, FrameTooLarge)


def targets() -> list[str]:
    return ["frame", "rpc"] + [f"core:{name}" for name in PROTOCOLS]


def seeds() -> list[bytes]:
    """Valid inputs the mutations start from: frames and RPCs of every kind the nodes exchange."""
    rng = random.Random(7)
    rpcs = [wire.subscriptions_rpc(["t0", "t1"])]
    msg = wire.RPC()
    msg.publish.append(wire.make_message("n1", 1, "t0", rng.randbytes(200)))
    rpcs.append(msg)
    ctl = wire.RPC()
    ctl.control.ihave.add(topicID="t0", messageIDs=[b"n1-1", b"n1-2"])
    ctl.control.iwant.add(messageIDs=[b"n1-1"])
    ctl.control.graft.add(topicID="t0")
    ctl.control.prune.add(topicID="t0", backoff=60)
    ctl.control.idontwant.add(messageIDs=[b"n1-1"])
    rpcs.append(ctl)
    # GossipSub's own: a message signed by the core target's neighbour "b" and its go-form ids
    ids = MessageIds("b", "from-seqno", True, Identities(1, lambda: ["a", "b"]))
    signed = wire.RPC()
    signed.publish.append(ids.author(1, "t0", rng.randbytes(200)))
    signed.control.ihave.add(topicID="t0", messageIDs=[ids.to_wire("b-1"), ids.to_wire("b-2")])
    signed.control.idontwant.add(messageIDs=[ids.to_wire("b-1")])
    rpcs.append(signed)
    out = [wire.encode_rpc(r) for r in rpcs]
    for cls in PROTOCOLS.values():
        out += list(getattr(cls, "fuzz_seeds", lambda: [])())
    framed = [encode_frame(Frame(rpc=p)) for p in out]
    framed += [encode_frame(Frame(hello=Hello(node_id="n1", protocol="gossipsub", run_id="r"))),
               encode_frame(Frame(probe=Probe(kind=Probe.PING, nonce=3)))]
    return out + framed


def mutate(data: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """One malformed variant of `data`: truncated, bit-flipped, bytes inserted or deleted, spliced
    with another input, or a length prefix that lies."""
    op = rng.randrange(6)
    b = bytearray(data or b"\x00")
    if op == 0:
        return bytes(b[:rng.randrange(len(b) + 1)])
    if op == 1:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == 2:
        at = rng.randrange(len(b) + 1)
        return bytes(b[:at] + rng.randbytes(rng.randint(1, 32)) + b[at:])
    if op == 3:
        at = rng.randrange(len(b))
        return bytes(b[:at] + b[at + rng.randint(1, 16):])
    if op == 4:
        other = rng.choice(corpus)
        return bytes(b[:rng.randrange(len(b) + 1)] + other[rng.randrange(len(other) + 1):])
    lie = rng.choice([0x7F, 0xFF, 0xFFFF, 0xFFFFFF, 0x7FFFFFFF, 4 * 1024 * 1024 + 1])
    return bytes([0x0A | (rng.randrange(4) << 3)]) + encode_varint(lie) + bytes(b)


# targets ---------------------------------------------------------------------------------------

def _frame_target() -> Target:
    def run(data: bytes) -> None:
        decoder = FrameDecoder(64 * 1024)
        cut = data[0] % 7 + 1 if data else 1  # fed in chunks, as a socket gives them
        try:
            for i in range(0, len(data), cut):
                decoder.feed(data[i:i + cut])
        except REFUSALS:
            pass
    return run


def _rpc_target() -> Target:
    def run(data: bytes) -> None:
        try:
            rpc = wire.decode_rpc(data)
        except DecodeError:
            return
        wire.message_topics(data)
        for m in rpc.publish:
            wire.default_msg_id(m)
    return run


def _core_target(name: str) -> Target:
    from node.simulated.virtual_network import MemNetwork

    cls = PROTOCOLS[name]
    net = MemNetwork(seed=1, latency=0.001)
    for node in ("a", "b"):
        net.add_node(node, cls, cls.Params())
    if hasattr(cls, "subscribe"):
        for node in ("a", "b"):
            try:
                net.nodes[node].core.subscribe("t0")
            except Exception:  # noqa: BLE001 - protocols without topics
                pass
    net.connect("b", "a")
    net.run(until=1.0)
    counter = [0]

    def run(data: bytes) -> None:
        net.nodes["a"].core.on_frame("b", data)
        counter[0] += 1
        if counter[0] % 500 == 0:  # let timers (heartbeats, epochs) run over the state built up
            net.run(until=net.now + 1.0)
    return run


def make_target(name: str) -> Target:
    if name == "frame":
        return _frame_target()
    if name == "rpc":
        return _rpc_target()
    if name.startswith("core:") and name[5:] in PROTOCOLS:
        return _core_target(name[5:])
    raise SystemExit(f"unknown decoder {name!r}; known: {', '.join(targets())}")


# engines ---------------------------------------------------------------------------------------

class Tally:
    def __init__(self, name: str, engine: str):
        self.name, self.engine = name, engine
        self.frames = self.crashes = 0
        self.first: str | None = None

    def call(self, target: Target, data: bytes) -> None:
        self.frames += 1
        try:
            target(data)
        except Exception:  # noqa: BLE001 - that is what we are counting
            self.crashes += 1
            if self.first is None:
                self.first = f"input {data[:64].hex()}...\n{traceback.format_exc()}"

    def report(self) -> None:
        print(f"decoder={self.name} frames={self.frames} crashes={self.crashes} engine={self.engine}", flush=True)
        if self.first:
            print(self.first, file=sys.stderr, flush=True)
        print(json.dumps({"decoder": self.name, "frames": self.frames, "crashes": self.crashes,
                          "engine": self.engine}), file=sys.stderr, flush=True)


def have_atheris() -> bool:
    return importlib.util.find_spec("atheris") is not None


def _instrument_node(atheris: Any) -> None:
    """Coverage for peerlab's own functions only (the decoders and cores; not protobuf, not the
    fuzzer): instrumenting everything loaded makes each input ~4x slower."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("node.") or name.endswith("_pb2") or name == __name__:
            continue
        for obj in list(vars(module).values()):
            if getattr(obj, "__module__", None) != name:
                continue
            members = [obj] if inspect.isfunction(obj) else (
                [v for v in vars(obj).values() if inspect.isfunction(v)] if inspect.isclass(obj) else [])
            for fn in members:
                atheris.instrument_func(fn)  # patches the code object: every reference sees it


def run_atheris(name: str, frames: int) -> None:
    import atheris

    target, tally = make_target(name), Tally(name, "atheris")
    _instrument_node(atheris)
    corpus = Path(tempfile.mkdtemp(prefix="peerlab-fuzz-"))
    for i, data in enumerate(seeds()):
        (corpus / f"seed{i}").write_bytes(data)

    def one(data: bytes) -> None:
        tally.call(target, data)
        if tally.frames >= frames:  # libFuzzer exits without running atexit handlers: report first
            tally.report()
            shutil.rmtree(corpus, ignore_errors=True)
            os._exit(0)

    atheris.Setup([sys.argv[0], f"-runs={frames * 2}", "-max_len=8192", "-seed=1", str(corpus)], one)
    atheris.Fuzz()


def run_hypothesis(name: str, frames: int, seed: int = 1) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    target, tally = make_target(name), Tally(name, "hypothesis")
    corpus = seeds()
    inputs = st.one_of(
        st.binary(max_size=4096),
        st.tuples(st.sampled_from(corpus), st.randoms(use_true_random=False), st.integers(1, 4)).map(
            lambda t: _mutated(t[0], t[1], t[2], corpus)))

    @hseed(seed)
    @settings(max_examples=frames, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(inputs)
    def fuzz(data: bytes) -> None:
        tally.call(target, data)

    fuzz()
    tally.report()


def _mutated(data: bytes, rng: random.Random, rounds: int, corpus: list[bytes]) -> bytes:
    for _ in range(rounds):
        data = mutate(data, rng, corpus)
    return data


def main(argv: list[str]) -> None:
    name, frames, engine = argv[0], int(argv[1]), argv[2]
    if engine == "atheris":
        run_atheris(name, frames)
    else:
        run_hypothesis(name, frames)


if __name__ == "__main__":
    main(sys.argv[1:])
