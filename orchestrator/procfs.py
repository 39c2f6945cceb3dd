"""What /proc says of a process on this host: its memory (RSS, PSS), CPU time, parent, command and
descendants. Every reader returns an empty answer for a process that is gone, never an error."""
from __future__ import annotations

import os
from pathlib import Path


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB; (0, 0) once it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return rss, pss


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command (field 3 on)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def cpu_s(pid: int) -> float | None:
    """CPU time (user + system, all its threads) used so far, in seconds."""
    fields = _stat(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def running(pid: int) -> bool:
    """Whether the process is there and not a zombie (an orphan whose reaper has not reaped it yet)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def command(pid: int) -> str:
    """Its command name (15 characters at most); empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants alive now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return out


def descendants(pid: int) -> set[int]:
    """The processes below `pid` (nodes, the fork server, the delay line, tc and ip children, a JVM)."""
    return set(tree(pid)) - {pid}
