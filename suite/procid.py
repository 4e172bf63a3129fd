"""Who a process is, proven well enough to end it: identity that survives clock steps and shared names.

The suite ends what a suite process that is gone left behind (runtimes of stale leases, containers
of a dead owner, Ray scratch folders). "Gone" is decided on a `ProcessIdentity`:

- `start_ticks`: the process's start in clock ticks since boot (`/proc/<pid>/stat`, field 22), a
  monotonic count that an NTP step or a manual clock change does not move (psutil's wall-clock
  `create_time` is boot time read *now* plus that count, so it moves with the clock);
- `boot_id`: the kernel's boot id: a pid and a tick count mean something only within one boot;
- `pidns`: the pid namespace (`/proc/self/ns/pid`): two suites in different containers that
  share a host name and a cache (CI runners given the Docker socket) see different pids;
- `host`: the host name, for the reader.

A process is judged only by a suite on the same host, boot and pid namespace
(`same_machine`); anything else is "not ours to judge" and left alone. Off Linux the start is the
wall-clock start in centiseconds, the boot id the boot time, and the namespace "-".
`signal_if_same` signals a pid only if it is still the process that started at that tick
(through a pidfd where the kernel has them, so the pid cannot be reused between check and signal).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
from typing import Any

import psutil
from pydantic import BaseModel

_LINUX = sys.platform.startswith("linux")


class ProcessIdentity(BaseModel):
    """A process as it can be recognised later on this machine (see the module docstring)."""

    pid: int
    start_ticks: int
    boot_id: str
    pidns: str
    host: str


@functools.lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id (Linux: the kernel's random boot id; elsewhere the boot time)."""
    if _LINUX:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
                return fh.read().strip()
        except OSError:
            pass
    return f"boot-{int(psutil.boot_time())}"


@functools.lru_cache(maxsize=1)
def pid_namespace() -> str:
    """This process's pid namespace, e.g. "pid:[4026531836]" ("-" where there are none)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "-"


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (monotonic); None if there is no such process."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if _LINUX:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            # the command name (field 2) may hold spaces and parentheses: fields follow the last ')'
            return int(stat[stat.rindex(b")") + 2:].split()[19])
        except (OSError, ValueError, IndexError):
            return None
    try:
        return int(round(psutil.Process(pid).create_time() * 100))
    except psutil.Error:
        return None


def identity(pid: int | None = None) -> ProcessIdentity | None:
    """The identity of `pid` (default: this process); None if it is gone."""
    pid = os.getpid() if pid is None else pid
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    return ProcessIdentity(pid=pid, start_ticks=ticks, boot_id=boot_id(), pidns=pid_namespace(),
                           host=socket.gethostname())


def same_machine(boot: Any, pidns: Any, host: Any) -> bool:
    """Whether a recorded boot id, pid namespace and host are this process's: only then do a
    recorded pid and start mean anything here (a missing one: not ours to judge)."""
    if not all(isinstance(v, str) and v for v in (boot, pidns, host)):
        return False
    return boot == boot_id() and pidns == pid_namespace() and host == socket.gethostname()


def is_same(pid: Any, ticks: Any) -> bool:
    """Whether `pid` still runs and is the process that started at `ticks` (not a reused pid)."""
    if not isinstance(ticks, int) or isinstance(ticks, bool):
        return False
    return start_ticks(pid) == ticks


def owner_gone(recorded: dict[str, Any], prefix: str = "") -> bool | None:
    """For a record of `{prefix}pid`, `{prefix}start_ticks`, `{prefix}boot_id`, `{prefix}pidns`
    (and `{prefix}host`): True when that process is gone, False when it still runs, None when the
    record is not ours to judge (another boot, namespace or host, or fields missing)."""
    boot, ns = recorded.get(f"{prefix}boot_id"), recorded.get(f"{prefix}pidns")
    if not same_machine(boot, ns, recorded.get(f"{prefix}host")):
        return None
    pid, ticks = recorded.get(f"{prefix}pid"), recorded.get(f"{prefix}start_ticks")
    if not isinstance(pid, int) or not isinstance(ticks, int) or pid <= 0:
        return None
    return not is_same(pid, ticks)


def signal_if_same(pid: int, ticks: int, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to `pid` only if it is still the process that started at `ticks`; True if sent.

    Through a pidfd where the kernel offers one: the check and the signal then name the same
    process even if the pid is freed and reused in between."""
    fd: int | None = None
    try:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except (AttributeError, OSError):
            fd = None
        if not is_same(pid, ticks):
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if fd is not None:
            os.close(fd)
