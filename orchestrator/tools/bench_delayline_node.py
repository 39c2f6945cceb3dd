"""One namespace's side of `peerlab bench delayline` (started in it by bench_delayline.py).

A sender opens `--streams` TCP connections to the receivers (round robin) and, from `--start` (a
CLOCK_MONOTONIC time, shared by every namespace of the machine) for `--duration` seconds, writes one
`--message` on all of them at once, then the next round as soon as the last of the round is written:
GossipSub's pattern of a large message sent to all its mesh peers at once, back to back.
A receiver counts the payload bytes that arrive from `--warmup` seconds after the start to the end
(goodput, without TCP's slow start through a long round trip), by sender address; with `--ping ADDR`
it also times a small TCP request and its echo to ADDR every 50 ms in that window (the other
receiver: their links carry only acknowledgements, so the round trip is the delay line's and the
kernel's, not the queue of a full uplink). Each prints one JSON line when done.
"""
from __future__ import annotations

import argparse
import json
import socket
import threading
import time

DATA_PORT, PING_PORT = 5001, 5002
PING_EVERY = 0.05


def _connect(addr: str, port: int) -> socket.socket:
    for _ in range(100):
        try:
            return socket.create_connection((addr, port), timeout=5)
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"no connection to {addr}:{port}")


def _sleep_until(t: float) -> None:
    while (left := t - time.monotonic()) > 0:
        time.sleep(left)


def sender(receivers: list[str], streams: int, message: int, start: float, duration: float) -> dict:
    conns = [_connect(receivers[i % len(receivers)], DATA_PORT) for i in range(streams)]
    payload = b"m" * message
    end = start + duration
    rounds = 0
    _sleep_until(start)
    while time.monotonic() < end:
        threads = [threading.Thread(target=c.sendall, args=(payload,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rounds += 1
    for c in conns:
        c.close()
    return {"rounds": rounds}


def receiver(addr: str, ping: str | None, start: float, warmup: float, duration: float) -> dict:
    counted: dict[str, int] = {}
    lock = threading.Lock()
    window = (start + warmup, start + duration)

    def count(conn: socket.socket, peer: str) -> None:
        while data := conn.recv(1 << 20):
            if window[0] <= time.monotonic() < window[1]:
                with lock:
                    counted[peer] = counted.get(peer, 0) + len(data)

    def echo(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(64):
            conn.sendall(data)

    def serve(port: int, handle) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, port))
        srv.listen(64)
        while True:
            conn, (peer, _) = srv.accept()
            args = (conn, peer) if handle is count else (conn,)
            threading.Thread(target=handle, args=args, daemon=True).start()

    threading.Thread(target=serve, args=(DATA_PORT, count), daemon=True).start()
    threading.Thread(target=serve, args=(PING_PORT, echo), daemon=True).start()
    rtts: list[float] = []
    if ping:
        conn = _connect(ping, PING_PORT)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _sleep_until(window[0])
        while time.monotonic() < window[1]:
            t = time.monotonic()
            conn.sendall(b"p")
            conn.recv(64)
            rtts.append((time.monotonic() - t) * 1000)
            _sleep_until(t + PING_EVERY)
    _sleep_until(window[1] + 0.5)
    with lock:
        return {"bytes": dict(counted), "window_s": window[1] - window[0], "rtt_ms": rtts}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=["sender", "receiver"])
    p.add_argument("--addr", help="receiver: the address to listen on")
    p.add_argument("--to", default="", help="sender: comma-separated receiver addresses")
    p.add_argument("--ping", help="receiver: time round trips to this receiver")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--message", type=int, default=200_000)
    p.add_argument("--start", type=float, required=True)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--duration", type=float, required=True)
    a = p.parse_args()
    if a.role == "sender":
        out = sender(a.to.split(","), a.streams, a.message, a.start, a.duration)
    else:
        out = receiver(a.addr, a.ping, a.start, a.warmup, a.duration)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
