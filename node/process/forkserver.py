"""A fork server for node processes: imports the node's modules once, then forks a child per node.

Starting a fresh interpreter per node costs about half a CPU-second of imports (asyncio, aiohttp,
protobuf, pydantic); 200 of them on 2 cores is most of a minute. A fork of a process that already
holds those modules takes milliseconds, and the children share the pages. The local backend runs
one fork server per run. It reads JSON lines on stdin and writes JSON lines on stdout:

    {"op": "spawn", "node": "n3", "netns": "plabc123-n3", "config": "...json", "out": "...out",
     "user": [uid, gid]}
      -> {"spawned": "n3", "pid": 1234}
    the same with "argv": [...]: the child execs that command (an adapter's node) in the namespace;
    with "drops_itself": true, a command that drops to "user" itself (the gossipsub-interop shim, which
    needs root to give its binary a host name and /etc/hosts: node/interop/shim.py)

In the namespace, before it runs anything of the node's, a child becomes the run's node user
(node/process/privileges.py): no capabilities, no way back.
    a child ended -> {"exit": 1234, "code": 0}

It exits when stdin closes (the orchestrator ended or died); its children live on until stopped,
and `peerlab clean` finds them by their network namespace.
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import traceback

from pyroute2 import netns

import node.process.control  # noqa: F401  (preloaded for the children)
import node.process.runtime  # noqa: F401
from node.__main__ import main as node_main
from node.eventlog import load_schema
from node.process import privileges

# What a node would otherwise read from the interpreter's own files once it runs as the node user,
# who may not reach them (a Python installed under root's home): read here, before the fork
load_schema()
import encodings.idna  # noqa: E402,F401  (host names)
import importlib.readers  # noqa: E402,F401


def _child(cmd: dict) -> None:
    code = 1
    try:
        os.setsid()
        out = os.open(cmd["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        netns.setns(cmd["netns"], flags=0, fork=False)
        if cmd.get("user"):
            uid, gid = cmd["user"]
            if cmd.get("drops_itself"):
                os.environ[privileges.NODE_USER_ENV] = f"{uid}:{gid}"
            else:
                privileges.drop_privileges(uid, gid)
        if cmd.get("argv"):
            os.execvp(cmd["argv"][0], cmd["argv"])  # does not return; its failure is reported below
        node_main(["--config", cmd["config"]])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - report anything, then leave without running parent code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _emit(obj: dict) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _emit({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def serve() -> None:
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.2)
        _reap()
        if not ready:
            continue
        data = os.read(0, 65536)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            cmd = json.loads(line)
            if cmd.get("op") == "spawn":
                pid = os.fork()
                if pid == 0:
                    _child(cmd)
                _emit({"spawned": cmd["node"], "pid": pid})


if __name__ == "__main__":
    # argv carries the run's scratch directory, so `ps` and `peerlab clean` can tell whose it is
    if os.getpriority(os.PRIO_PROCESS, 0) < 0:  # started again while the orchestrator's priority is
        os.setpriority(os.PRIO_PROCESS, 0, 0)   # raised (orchestrator/run/priority.py): nodes stay at 0
    serve()
