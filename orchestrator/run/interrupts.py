"""How a run is stopped by a signal: SIGINT and SIGTERM cancel the run's task (teardown follows) and
ask a long blocking step to stop between two nodes (`Backend.check_stop`); blocking netlink or engine
work runs in a thread that finishes before the cancellation goes on, so teardown sees everything it
made."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any, Callable

from orchestrator.backends.base import StopRequested


class StoppedBySignal(RuntimeError):
    pass


async def blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a thread; if the run is cancelled meanwhile, it finishes (or stops at its next
    `check_stop`) before the cancellation goes on."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(fut)
    except StopRequested:
        # the signal handler asked the step to stop and has scheduled the run's cancellation:
        # take it here, so that it does not land in the middle of teardown
        await asyncio.sleep(10)
        raise StoppedBySignal("stopped by a signal") from None
    except asyncio.CancelledError:
        await asyncio.wait([fut])
        if not fut.cancelled():
            fut.exception()  # retrieved (a StopRequested, most likely): teardown follows
        raise


def cancel_on_signals(task: asyncio.Task, stopping: threading.Event) -> dict[int, Any]:
    """Install the handlers; returns the previous ones. Not loop.add_signal_handler: pyroute2 forks
    helpers that inherit asyncio's wake-up fd, and their SIGTERM would cancel our run."""
    owner = os.getpid()
    loop = asyncio.get_running_loop()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        stopping.set()
        loop.call_soon_threadsafe(task.cancel)
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
