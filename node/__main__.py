"""`python -m node --config FILE`: run one protocol node until /stop or SIGTERM."""
from __future__ import annotations

import argparse
import asyncio
import signal

from node.config import load_config
from node.process.runtime import NodeRuntime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m node", description="Run one peerlab protocol node.")
    parser.add_argument("--config", help="node config JSON (default: $PEERLAB_NODE_CONFIG)")
    args = parser.parse_args(argv)
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
