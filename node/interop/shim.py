"""One gossipsub-interop binary run as one peerlab node: `python -m node.interop --binary BIN --config FILE`.

The runner launches this as it launches any contract node (the config is node/contract.py's); it gives
the binary what the gossipsub-interop contract promises and turns what the binary says into peerlab's
event log:

- the host name `node<index>` and an /etc/hosts naming its peers `node<index>` (a UTS and a mount
  namespace of the binary's own, inside the node's network namespace), and its script in
  `<config>.params.json`;
- its start, a whole number of seconds before T0 (`LEAD`; on a restart, the next whole second from
  T0), since the script's times are whole seconds from the binary's start; its connects 6 s after
  the last binary's start (on a restart at once, to the peers the runner found up: its `dial`), and
  a last `waitUntil` at the run's end, since such a binary exits when its script is over;
- `start`, `t0`, `join` and `publish_message` at the times the script gives the binary, `ready` when
  it logs its `PeerID`, `deliver_message` and `duplicate_message` from its `Received Message` lines,
  `connect` and `disconnect` from the kernel's sockets, `stop` when SIGTERM has stopped it or its
  script has ended with the run. A binary that exits before that (its exit code, or 1 for a 0) ends
  the shim with its code, after a line on stderr saying so: the runner reports such a node.

What it cannot know: the binary's own clock starts when its main() runs, a few milliseconds after the
launch; the publishes logged here are the script's instants, so latencies include that start-up.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from node import contract
from node.eventlog import EventLog
from node.ids import node_index
from node.interop import script, sockets
from node.interop.stdout import Stdout
from node.process import privileges

LISTEN_S = 6       # whole seconds from the last binary's start to the connects: every one listens by then
CONNECT_BEFORE_T0 = 12  # the connects' least lead on T0 (the runner's is longer where dials take longer):
                        # each binary dials its peers once, one after another (the contract's reference
                        # binaries exit if a dial fails, so a connect must come after its peers listen)
LEAD = CONNECT_BEFORE_T0 + LISTEN_S  # the last binary's least lead on T0
STARTS_PER_SECOND = 1   # binaries started at once share the CPU as their runtimes start, and their clocks lag
POLL = 0.2         # seconds between looks at the node's sockets
STOP_GRACE = 5.0   # seconds SIGTERM has before SIGKILL

_CLONE_NEWNS, _CLONE_NEWUTS = 0x00020000, 0x04000000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG = 1


def interop_peer_id(index: int) -> str:
    """The peer id the contract gives node `index`: Ed25519, seeded by the index (8 bytes, little endian)."""
    return contract.peer_id(index.to_bytes(8, "little").hex() + "00" * 24)


def hosts_file(config: dict[str, Any]) -> str:
    lines = ["127.0.0.1\tlocalhost", f"{config['listen']['host']}\tnode{node_index(config['node_id'])}"]
    lines += [f"{a['host']}\tnode{node_index(p)}" for p, a in sorted(config["peers"].items())]
    return "\n".join(lines) + "\n"


def _own_host(hostname: str, hosts: str, go: int) -> None:
    """In the binary's process before exec: its own host name and /etc/hosts, and death with the shim (a
    SIGKILL to the node, the fault timeline's `kill`, takes the binary too); then the run's node user
    (its privileges dropped: node/process/privileges.py), and it waits for a byte on `go` (none: the
    node was stopped before it started)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUTS | _CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(UTS, mount) (the shim runs as root)")
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private in the binary's mount namespace")
    socket.sethostname(hostname)
    if libc.mount(hosts.encode(), b"/etc/hosts", None, _MS_BIND, None) != 0:
        raise OSError(ctypes.get_errno(), "binding the run's hosts file on /etc/hosts")
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    user = privileges.from_env()
    if user is not None:  # the binary runs as the run's node user, without capabilities
        privileges.drop_privileges(*user)
    if not os.read(go, 1):
        os._exit(0)
    os.close(go)


def _sleep_until(ns: int) -> None:
    while (left := ns - time.time_ns()) > 0:
        time.sleep(min(left / 1e9, 0.5))


class Shim:
    def __init__(self, binary: str, config_path: Path):
        self.binary = binary
        self.config_path = config_path
        self.config: dict[str, Any] = json.loads(config_path.read_text())
        self.node = self.config["node_id"]
        self.index = node_index(self.node)
        self.log = EventLog.open(self.node, self.config["event_log"])
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.child: subprocess.Popen | None = None

    def emit(self, kind: str, **fields: Any) -> None:
        with self.lock:
            self.log.emit(kind, **fields)

    def start_times(self) -> tuple[int, int, int]:
        """(the binary's start in unix ns, T0's whole seconds after it, when it connects). Every binary
        connects at the config's `connect_at_ns` (the runner gives each the same instant, early enough
        for the slowest to dial its peers one after another by T0; else CONNECT_BEFORE_T0 s before T0),
        in whole seconds before T0. They start STARTS_PER_SECOND to a whole second, the last LISTEN_S
        before that instant (every one listens by then: the runner checks it), in node order (each one's
        runtime takes CPU as it starts, and its clock starts only after that: six go-libp2p binaries
        started at once on 2 cores lagged about 30 ms, one alone about 7)."""
        t0 = self.config["t0_ns"]
        if t0 is None:
            raise SystemExit("gossipsub-interop nodes need T0 in their config (t0_ns)")
        connect = self.config.get("connect_at_ns") or t0 - CONNECT_BEFORE_T0 * 1_000_000_000
        before_t0 = -(-(t0 - connect) // 1_000_000_000)  # whole seconds
        lead = before_t0 + LISTEN_S + max(0, len(self.config["peer_ids"]) - 1 - self.index) // STARTS_PER_SECOND
        now = time.time_ns()
        if now < t0 - lead * 1_000_000_000 - 200_000_000:
            return t0 - lead * 1_000_000_000, lead, lead - before_t0
        after = -(-(now + 50_000_000 - t0) // 1_000_000_000)  # the next whole second from T0
        return t0 + after * 1_000_000_000, -after, 0

    def run(self) -> int:
        self.emit("start", protocol=self.config["protocol"])
        begin, t0_after, connect_at = self.start_times()
        end_s = self.config.get("end_s")
        if end_s is None:
            raise SystemExit("gossipsub-interop nodes need the run's end in their config (end_s)")
        # (a restart's `dial`: the neighbours the runner found up, since its peers' connects are behind them)
        params = {"script": script.node_script(self.config, t0_after, connect_at, end_s)}
        script_end = script.run_end(t0_after, end_s)
        params_path = self.config_path.with_name(self.config_path.stem + ".params.json")
        params_path.write_text(json.dumps(params))
        params_path.chmod(0o644)  # read by the binary, as the node user
        hosts_path = self.config_path.with_name(self.config_path.stem + ".hosts")
        hosts_path.write_text(hosts_file(self.config))
        hosts_path.chmod(0o644)
        names = {interop_peer_id(node_index(p)): p for p in self.config["peer_ids"]}
        out = Stdout(self.node, names, list(self.config["subscriptions"]))
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        go_read, go_write = os.pipe()
        launched = [0]

        def release() -> None:  # the binary's exec, at its start (or its end, if SIGTERM came first)
            while not self.stopping.is_set() and (left := begin - time.time_ns()) > 0:
                self.stopping.wait(min(left / 1e9, 0.5))
            launched[0] = time.time_ns()  # the script's times count from here (the binary's clock: a little later)
            os.write(go_write, b"x" if not self.stopping.is_set() else b"")
            os.close(go_write)

        threading.Thread(target=release, daemon=True).start()
        # Popen returns once the binary is exec'd; its namespaces are made before, while it waits for the start
        # the registered program is opened here, by the shim, and run through that descriptor: the node
        # user it runs as need not reach its folder (a binary under its owner's home, or root's)
        program = os.open(self.binary, os.O_RDONLY)
        self.child = subprocess.Popen(
            [self.binary, "--params", str(params_path)], executable=f"/proc/self/fd/{program}",
            stdout=subprocess.PIPE, text=True, pass_fds=(go_read, program),
            preexec_fn=lambda: _own_host(f"node{self.index}", str(hosts_path), go_read))
        os.close(go_read)
        os.close(program)
        launched = launched[0]
        threading.Thread(target=self._timeline, args=(launched, t0_after, connect_at), daemon=True).start()
        threading.Thread(target=self._sockets, daemon=True).start()
        assert self.child.stdout is not None
        for line in self.child.stdout:
            for event in out.events(line):
                kind = event.pop("type")
                self.emit(kind, **event)
                if kind == "ready":
                    self.emit("t0", t0=self.config["t0_ns"])
        code = self.child.wait()
        if self.stopping.is_set():
            self.emit("stop", reason="sigterm")
            return 0
        if code == 0 and time.time_ns() >= launched + script_end * 1_000_000_000:
            self.emit("stop", reason="script ended")
            return 0
        ran = (time.time_ns() - launched) / 1e9
        print(f"gossipsub-interop node {self.node}: {self.binary} exited {code} after {ran:.1f} s of its script "
              f"(which ends at {script_end} s, the run's end)", file=sys.stderr)
        return code if code > 0 else 1

    def stop(self) -> None:
        self.stopping.set()
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()
            threading.Timer(STOP_GRACE, lambda: self.child and self.child.poll() is None and self.child.kill()).start()

    def _timeline(self, begin: int, t0_after: int, connect_at: int) -> None:
        """`join` and `publish_message` at the instants the script gives the binary."""
        for topic in self.config["subscriptions"]:
            self.emit("join", topic=topic)
        for elapsed, action in script.node_timeline(self.config, t0_after, connect_at):
            at = begin + elapsed * 1_000_000_000
            _sleep_until(at)
            if self.stopping.is_set():
                return
            if action["type"] == "subscribeToTopic":
                self.emit("join", topic=action["topicID"])
            else:  # stamped with the script's instant, not this thread's wake-up (late on a busy machine,
                # which made copies look quicker than their link: 1.1 ms for a 20 ms one)
                msg_id, _, size = script.message_of(action["messageID"])
                self.emit("publish_message", ts=int(at), topic=action["topicID"], msg_id=msg_id, size=size,
                          seq=int(msg_id.rsplit("-", 1)[1]))

    def _sockets(self) -> None:
        peers = {a["host"]: p for p, a in self.config["peers"].items()}
        watch = sockets.Connections(peers)
        while not self.stopping.is_set() and self.child is not None and self.child.poll() is None:
            connected, gone = watch.changes()
            for peer, outbound in connected:
                self.emit("connect", peer=peer, outbound=outbound)
            for peer in gone:
                self.emit("disconnect", peer=peer, reason="closed")
            time.sleep(POLL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.interop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the gossipsub-interop binary (it takes --params FILE)")
    parser.add_argument("--config", required=True, type=Path, help="the node's contract config (JSON)")
    args = parser.parse_args(argv)
    if not os.access(args.binary, os.X_OK):
        print(f"gossipsub-interop binary {args.binary} is not an executable file", file=sys.stderr)
        return 2
    try:
        return Shim(args.binary, args.config).run()
    except ValueError as e:  # a schedule the contract cannot say, a parameter it has no name for
        print(f"gossipsub-interop node: {e}", file=sys.stderr)
        return 2
