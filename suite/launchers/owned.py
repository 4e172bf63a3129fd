"""The processes a runtime or install recipe started, found by a mark in their environment.

Every process the local launcher spawns (a runtime, an install recipe) gets `SUITE_OWNED_BY=<mark>`
in its environment, a value made once per start (the suite's pid, its start tick and 64 random
bits). Whatever that process starts inherits the mark, also a worker that leaves the process group
(its own session, a double fork): the kernel shows the environment a process was started with in
`/proc/<pid>/environ` (to its own user). A lease records its runtime's mark, so the processes ended
for a runtime are exactly those that carry its mark: a process that took a pid or a process group
id the runtime once had carries another environment and is never touched. A program that clears
its environment before it execs (`env -i`) drops the mark, and with it this protection.

`kill_marked` signals each marked process through a pidfd opened before its environment is read,
so the process whose mark was read is the process signalled, even if its pid is freed and reused
in between. Linux only; elsewhere nothing is marked and nothing found.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys

from suite import procid

MARK_ENV = "SUITE_OWNED_BY"
_LINUX = sys.platform.startswith("linux")


def new_mark() -> str:
    """A mark for one start: this suite process (pid, start tick) and 64 random bits."""
    return f"{os.getpid()}-{procid.start_ticks(os.getpid()) or 0}-{secrets.token_hex(8)}"


def _environ_mark(pid: int) -> str | None:
    """The mark in the environment `pid` was started with; None if none, or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return None
    prefix = MARK_ENV.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("ascii", "replace")
    return None


def mark_of(pid: int) -> str | None:
    """The mark `pid` carries (read from /proc), None where it carries none."""
    return _environ_mark(pid) if _LINUX else None


def marked(mark: str) -> list[int]:
    """The pids of live processes (of this user) that carry `mark`, zombies included."""
    if not _LINUX or not mark:
        return []
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and _environ_mark(int(name)) == mark:
            found.append(int(name))
    return found


def kill_marked(mark: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send `sig` to every process that carries `mark`; the pids signalled (never the caller)."""
    if not _LINUX or not mark:
        return []
    sent = []
    for pid in marked(mark):
        fd: int | None = None
        try:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except (AttributeError, OSError):
                fd = None
            ticks = procid.start_ticks(pid)
            if _environ_mark(pid) != mark:  # read again, now that the pidfd holds the process
                continue
            if fd is not None:
                signal.pidfd_send_signal(fd, sig)
            elif ticks is None or not procid.signal_if_same(pid, ticks, sig):
                continue
            sent.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
        finally:
            if fd is not None:
                os.close(fd)
    return sent
