"""Whether a PID recorded earlier still names the process that was started then.

A PID names another process once its own has exited and been reaped, and after a reboot:
`bin/cluster down` reading a day-old cluster.json must not signal whatever runs under
those numbers now. So `bin/cluster` records each process's identity when it starts one:
its start time (clock ticks since boot, field 22 of /proc/PID/stat, which exec does not
change) and the boot it started in (/proc/sys/kernel/random/boot_id). A PID is "ours"
only while both still match. A record written before identities were kept (no
`identity`) is ours only if the process's command line looks like what we start there
(the caller says what that is).

`signal_if_ours` opens a pidfd, checks the identity, then signals through the pidfd, so
the process checked is the process signalled even if it exits in between.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
OURS = "ours"
GONE = "gone"  # no such process, or a zombie
OTHER = "other"  # the PID names a process we did not start
_START_TIME_FIELD = 22  # /proc/PID/stat, counted from 1 as proc(5) does
_POLL_S = 0.05

LooksOurs = Callable[[list[str]], bool]


def boot_id() -> str | None:
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip() or None
    except OSError:
        return None


def stat_after_comm(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after `(comm)` (field 3 onwards); comm may hold spaces."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    fields = stat_after_comm(pid)
    return None if fields is None else int(fields[_START_TIME_FIELD - 3])


def cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]] if raw else []


def identity_of(pid: int) -> dict[str, Any] | None:
    """What to record for a process just started (None if it is gone already)."""
    ticks = start_ticks(pid)
    return None if ticks is None else {"start_ticks": ticks, "boot_id": boot_id()}


def whose(pid: int | None, recorded: dict[str, Any] | None, looks_ours: LooksOurs) -> str:
    """OURS, GONE or OTHER for a PID recorded with `recorded` (identity_of's answer then,
    or None for a record made without one)."""
    if not pid:
        return GONE
    fields = stat_after_comm(pid)
    if fields is None or fields[0] == "Z":  # a zombie has exited; it only waits to be reaped
        return GONE
    if recorded and recorded.get("start_ticks") is not None:
        same_boot = recorded.get("boot_id") is None or recorded["boot_id"] == boot_id()
        return OURS if same_boot and int(fields[_START_TIME_FIELD - 3]) == recorded["start_ticks"] else OTHER
    argv = cmdline(pid)
    return OURS if argv and looks_ours(argv) else OTHER


def describe(pid: int) -> str:
    """A few words on what runs as `pid` now, for messages."""
    argv = cmdline(pid)
    text = " ".join(argv) if argv else "?"
    return text if len(text) <= 80 else text[:77] + "..."


def signal_if_ours(pid: int | None, recorded: dict[str, Any] | None, looks_ours: LooksOurs, signum: int) -> bool:
    """Send `signum` if `pid` is still ours; whether it was sent."""
    if not pid:
        return False
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfds here (old kernel, other OS): check, then kill
        if whose(pid, recorded, looks_ours) != OURS:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
            return True
        return False
    try:
        if whose(pid, recorded, looks_ours) != OURS:
            return False
        try:
            signal.pidfd_send_signal(fd, signum)
        except ProcessLookupError:
            return False
        return True
    finally:
        os.close(fd)


def wait_not_ours(pid: int | None, recorded: dict[str, Any] | None, looks_ours: LooksOurs, timeout_s: float) -> bool:
    """Until `pid` is no longer our process (reaping it if it is our child); whether it went."""
    deadline = time.monotonic() + timeout_s
    while True:
        if whose(pid, recorded, looks_ours) != OURS:
            _reap_if_child(pid, recorded)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def _reap_if_child(pid: int | None, recorded: dict[str, Any] | None) -> None:
    """Reap the exited process if it is a child of this one (a LocalCluster in a test);
    only the one recorded: the PID may name another child of ours by now."""
    if pid and recorded and recorded.get("start_ticks") is not None and start_ticks(pid) == recorded["start_ticks"]:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
