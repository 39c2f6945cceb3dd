"""The node user: what a node process runs as on the local backend. A node's program (peerlab's own,
an adapter's, a user's registered binary) runs as an unprivileged user of its run, with no
capabilities and no way to regain them; the network namespace it runs in, its links and their
shaping stay the orchestrator's (root's). So a node cannot change its own links, open raw sockets,
read the orchestrator's files (its state, the run directory, store credentials) or signal processes
other than its run's nodes.

    run_user(short)            the run's node uid and gid (one per run: runs cannot reach each other)
    drop_privileges(uid, gid)  become that user: no supplementary groups, setgid, setuid (from root this
                               clears every capability), then no_new_privs (a setuid program cannot
                               give root back)

Imports nothing of peerlab's: the fork server and the gossipsub-interop shim call it in a child
before it runs a node.
"""
from __future__ import annotations

import ctypes
import os

UID_BASE = 0x6E000000  # 1,845,493,760: far above any account's uid; + the run's 24-bit short id
NODE_USER_ENV = "PEERLAB_NODE_USER"  # "uid:gid", for a node command that drops privileges itself (the shim)
_PR_SET_NO_NEW_PRIVS = 38


def run_user(short: str) -> tuple[int, int]:
    """The node uid (= gid) of the run whose short id (6 hex digits) is `short`."""
    uid = UID_BASE + (int(short, 16) & 0xFFFFFF)
    return uid, uid


def drop_privileges(uid: int, gid: int) -> None:
    """Become (uid, gid) for good: raises OSError if any step fails (a node must not run as root by
    accident)."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
        raise OSError("the node's privileges were not dropped")


def from_env() -> tuple[int, int] | None:
    """The node user the fork server handed a node command that drops privileges itself."""
    given = os.environ.get(NODE_USER_ENV)
    if not given:
        return None
    uid, _, gid = given.partition(":")
    return int(uid), int(gid)
