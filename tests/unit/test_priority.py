"""The orchestrator's priority during the timeline (orchestrator/run/priority.py): raised on every thread,
inherited by the threads started meanwhile, and put back on every one."""
import os
import threading

from orchestrator.run import priority


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_every_thread_runs_raised_and_is_put_back():  # (as root, as CI runs: raising needs it)
    before = {int(t): nice_of(int(t)) for t in os.listdir("/proc/self/task")}
    seen = {}
    with priority.Raised() as raised:
        assert raised.nice == priority.TIMELINE_NICE
        assert {nice_of(int(t)) for t in os.listdir("/proc/self/task")} == {priority.TIMELINE_NICE}
        started = threading.Event()
        done = threading.Event()

        def worker():
            seen["inside"] = nice_of(threading.get_native_id())
            started.set()
            done.wait(5)
            seen["after"] = nice_of(threading.get_native_id())

        thread = threading.Thread(target=worker)
        thread.start()
        started.wait(5)
    done.set()
    thread.join(5)
    assert seen == {"inside": priority.TIMELINE_NICE, "after": before[os.getpid()]}  # started inside: put back
    assert {int(t): nice_of(int(t)) for t in os.listdir("/proc/self/task") if int(t) in before} == before


def test_without_the_privilege_nothing_changes(monkeypatch):
    def refuse(which, who, value):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(priority.os, "setpriority", refuse)
    with priority.Raised() as raised:
        assert raised.nice is None
