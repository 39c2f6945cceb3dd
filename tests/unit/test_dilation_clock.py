"""Time dilation's clock (node/dilation.py) and the node runtime on it: instants map to experiment time
and back, every timer of d experiment seconds is armed for k*d real seconds, events are stamped in
experiment time; k = 1 is the wall clock itself."""
import asyncio
import time

import pytest

from node.config import NodeConfig
from node.dilation import Dilation
from node.process.runtime import NodeRuntime

EPOCH = 1_800_000_000_000_000_000


def test_instants_map_to_experiment_time_and_back():
    d = Dilation(2.0, EPOCH)
    assert d.experiment_ns(EPOCH) == EPOCH
    assert d.experiment_ns(EPOCH + 10_000_000_000) == EPOCH + 5_000_000_000  # 10 real s are 5 experiment s
    assert d.real_ns(EPOCH + 5_000_000_000) == EPOCH + 10_000_000_000
    for real in (EPOCH - 3, EPOCH + 123_456_789, EPOCH + 7_000_000_001):
        assert abs(d.real_ns(d.experiment_ns(real)) - real) <= 2
    assert d.real(0.1) == pytest.approx(0.2) and d.experiment(3.0) == pytest.approx(1.5)
    odd = Dilation(2.5, EPOCH)
    assert odd.experiment_ns(EPOCH + 5_000_000_000) == EPOCH + 2_000_000_000


def test_now_runs_k_times_slower(monkeypatch):
    real = {"ns": EPOCH + 4_000_000_000, "mono": 100.0}
    monkeypatch.setattr(time, "time_ns", lambda: real["ns"])
    monkeypatch.setattr(time, "monotonic", lambda: real["mono"])
    d = Dilation(4.0, EPOCH)
    assert d.time_ns() == EPOCH + 1_000_000_000
    mono0 = d.monotonic()
    real["ns"] += 8_000_000_000
    real["mono"] += 8.0
    assert d.time_ns() == EPOCH + 3_000_000_000 and d.time() == pytest.approx((EPOCH + 3e9) / 1e9)
    assert d.monotonic() - mono0 == pytest.approx(2.0)
    assert d.monotonic_ns() == pytest.approx(d.monotonic() * 1e9, abs=1)


def test_factor_one_is_the_wall_clock_exactly():
    d = Dilation(1.0, EPOCH)
    assert not d.on
    for x in (0, EPOCH + 1, 2**62 + 12345):
        assert d.experiment_ns(x) == x and d.real_ns(x) == x
    assert d.real(0.123) == 0.123
    before = time.time_ns()
    assert before <= d.time_ns() <= time.time_ns()
    before = time.monotonic()
    assert before <= d.monotonic() <= time.monotonic()


def test_a_factor_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        Dilation(0.5)


def _runtime(tmp_path, protocol: str, dilation: float) -> NodeRuntime:
    cfg = NodeConfig(run_id="r", node_id="n0", protocol=protocol, listen={"host": "127.0.0.1", "port": 0},
                     event_log=str(tmp_path / "n0.jsonl"), control={"token": "t" * 16, "unix": str(tmp_path / "c")},
                     dilation=dilation, dilation_epoch_ns=time.time_ns() - 10_000_000_000)
    return NodeRuntime(cfg)


@pytest.mark.parametrize("k", [1.0, 3.0])
def test_the_runtime_arms_every_timer_k_times_longer(tmp_path, monkeypatch, k):
    """A protocol core's timers (GossipSub's heartbeat), the lifecycle's schedule (call_at), attacker and
    resource timers all go through the runtime's dilated clock; so does the event log's stamp."""
    rt = _runtime(tmp_path, "gossipsub", k)
    armed: list[float] = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        call_later = loop.call_later
        monkeypatch.setattr(loop, "call_later", lambda delay, *a: (armed.append(delay), call_later(delay, *a))[1])
        rt.core.on_start()  # arms the first heartbeat, after the initial delay
        rt.core.on_timer("heartbeat", None)  # ... which arms the next one a heartbeat later
        params = rt.core.params
        assert armed == [pytest.approx(k * params.heartbeat_initial_delay), pytest.approx(k * params.heartbeat_interval)]
        armed.clear()
        rt.set_timer(0.25, "test")
        rt.call_at(rt.clock() + 2.0, lambda: None)
        assert armed[0] == pytest.approx(k * 0.25) and armed[1] == pytest.approx(k * 2.0, abs=0.01 * k)
    asyncio.run(go())
    assert rt.transport.time_scale == k
    assert rt.clock() == pytest.approx(rt.dilation.time()) and rt.core.clock == rt.dilation.monotonic
    # 10 real seconds since the epoch read as 10/k: the clock and every logged stamp are experiment time
    assert rt.clock() - rt.dilation.epoch_ns / 1e9 == pytest.approx(10 / k, abs=0.5)
    rt.trace("ready")
    rt.events.close()
    stamp = int((tmp_path / "n0.jsonl").read_text().splitlines()[-1].split('"ts":')[1].split(",")[0])
    assert (stamp - rt.dilation.epoch_ns) / 1e9 == pytest.approx(10 / k, abs=0.5)
