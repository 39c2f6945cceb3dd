"""`python -m node --config FILE`: run one protocol node until /stop or SIGTERM.

`python -m node --standby`: the same node made ready ahead of time: its modules imported (about half
a CPU-second), it reads the config file's path from stdin when its start is asked for. The node
supervisor keeps one in a pod, so that a node's start, or its restart after a crash, costs no
interpreter start."""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from node.config import load_config
from node.process.runtime import NodeRuntime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m node", description="Run one peerlab protocol node.")
    parser.add_argument("--config", help="node config JSON (default: $PEERLAB_NODE_CONFIG)")
    parser.add_argument("--standby", action="store_true",
                        help="import everything, then read the config file's path from stdin and run")
    args = parser.parse_args(argv)
    if args.standby:
        import node.process.control  # noqa: F401 - what the node would import once started
        path = sys.stdin.readline().strip()
        if not path:
            return  # the supervisor ended without starting it
        args.config = path
    cfg = load_config(args.config)

    async def run() -> None:
        rt = NodeRuntime(cfg)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, rt.stop, signal.Signals(sig).name)
        await rt.run()

    asyncio.run(run())


if __name__ == "__main__":
    main()
