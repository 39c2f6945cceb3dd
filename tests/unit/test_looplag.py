"""The node's loop-lag figures (node/process/looplag.py): windows by sample number, a restarted node, the
tick for the run's size, and a real loop blocked on purpose."""
import asyncio
import time

from node.process.looplag import MAX_TICK_S, TICK_S, LoopLag


def test_windows_by_number():
    lag = LoopLag(keep=10)
    for ms in range(1, 101):
        lag.record(float(ms))
    assert lag.count == 100 and len(lag.lags_ms) <= 10  # older samples dropped, numbers kept
    w = lag.window(95)
    assert (w["samples"], w["max_ms"], w["next"]) == (5, 100.0, 100)
    assert w["hist"] == [0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]  # 96..100 ms: at most 100 (EDGES_MS)
    assert lag.window(100)["samples"] == 0
    assert lag.window(500)["samples"] == len(lag.lags_ms)  # a restarted node: from its first sample


def test_tick_for_the_run_size():
    assert LoopLag.tick_for(4) == TICK_S and LoopLag.tick_for(10) == 0.1 and LoopLag.tick_for(500) == MAX_TICK_S == 2.0
    assert TICK_S < LoopLag.tick_for(30) == 0.3 < MAX_TICK_S


def test_a_blocked_loop_is_seen():
    async def main():
        lag = LoopLag(tick_s=0.01)
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # the loop is held, as a busy node's would be
        await asyncio.sleep(0.05)
        task.cancel()
        return lag.window()
    w = asyncio.run(main())
    assert w["max_ms"] >= 60 and w["samples"] >= 3
