"""A guard beside each local runtime: its whole process group ends when the suite ends, kill -9 included.

The runtime's leader gets the kernel's parent-death signal (SIGKILL, suite.launchers.local), but
the processes it starts do not: vLLM's engine core and its GPU workers, orphaned, kept the GPU
until the next start found their lease. The guard is a small process started with each runtime,
outside its group, with its own parent-death signal (SIGTERM, set by the exec shim, which blocks it
until the guard's handler is in place: the kernel sends it when the thread that started the guard
ends, the same thread that started the runtime). On that
signal, on SIGHUP, or when it sees its parent gone, it SIGKILLs the runtime's process group and
exits. It also ends the group when the leader has gone and members remain (a leader that crashed
leaves no workers behind), and exits on its own once the group is empty. Given the runtime's
mark (suite.launchers.owned), ending the group also ends every process that carries the mark: a
worker that started its own session (or double-forked) has left the group but not the mark.
It also keeps a roster beside the runtime's lease: every 2 s, each process of the group and each
one that carries the mark, by pid and start tick, as seen while the leader ran. The next start
ends those (each only if its pid still names the process that started at that tick) when the
guard itself is gone too: a member whose environment was overwritten (a process title set over
it) has lost its mark but not its place in the roster. Linux only (prctl); elsewhere no guard is
started and the leases still end what is left at the next start.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 0.25

# Standard library only: it runs in the suite's interpreter, before anything else is imported.
GUARD_SOURCE = r"""
import ctypes, os, signal, sys, time
ROSTER_EVERY = 8  # polls between two writes of the roster (2 s)
pgid, parent, poll = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
needle = ("SUITE_OWNED_BY=" + sys.argv[4]).encode() if len(sys.argv) > 4 and sys.argv[4] else b""
def carries(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            return needle in fh.read(1 << 20).split(b"\0")
    except OSError:
        return False
def kill_marked():
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid() or not carries(int(name)):
            continue
        pid, fd = int(name), None
        try:
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                fd = None
            if not carries(pid):  # read again now that the pidfd holds the process
                continue
            if fd is not None:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
            found += 1
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
    return found
roster = sys.argv[5] if len(sys.argv) > 5 else ""
def started(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[2]), int(fields[19])  # process group, start in clock ticks since boot
    except (OSError, ValueError, IndexError):
        return None
written = [None]
def write_roster():
    leader = started(pgid)
    if leader is None or leader[1] != leader_ticks:
        return  # the leader is gone: its group id proves nothing now
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        seen = started(int(name))
        if seen is not None and (seen[0] == pgid or (needle and carries(int(name)))):
            found.append("%s %d" % (name, seen[1]))
    text = "\n".join(sorted(found)) + "\n"
    if text == written[0]:
        return
    tmp = "%s.%d.tmp" % (roster, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, roster)
        written[0] = text
    except OSError:
        pass
def end(*_):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if needle:
        for _ in range(5):  # one may fork between the listing and the kill: look again
            if not kill_marked():
                break
            time.sleep(0.05)
    os._exit(0)
signal.signal(signal.SIGTERM, end)
signal.signal(signal.SIGHUP, end)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the suite, which stops the runtime itself
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by the exec shim until now
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    end()
leader_ticks = (started(pgid) or (0, -1))[1]
sys.stdout.write("ready\n")
sys.stdout.flush()
polls = 0
while True:
    time.sleep(poll)
    if os.getppid() != parent:
        end()
    if roster and polls % ROSTER_EVERY == 0:
        write_roster()  # while the leader runs, its group is the runtime's: each member as it is now
    polls += 1
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        end()  # the group is empty: the runtime was stopped (what left the group goes with it)
    except PermissionError:
        pass
    try:
        os.kill(pgid, 0)
    except ProcessLookupError:
        end()  # the leader is gone (and reaped) but members of its group remain
    except PermissionError:
        pass
"""


class Guard:
    """The guard process of one runtime group; `stop()` ends it (the runtime is stopped apart)."""

    def __init__(self, proc: subprocess.Popen[Any], pgid: int):
        self.proc, self.pgid = proc, pgid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGKILL)  # not SIGTERM: that would end the group
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def start_guard(pgid: int, popen: Any = subprocess.Popen, mark: str | None = None,
                roster: Path | None = None) -> Guard | None:
    """A guard for the process group `pgid` (the runtime's leader pid) and the processes that carry
    `mark`, started through `popen` (the launcher's spawner, so its parent-death signal follows
    the same thread); None off Linux or when it cannot start (the leases still cover the runtime).
    `roster`: the file it keeps the group's members in (pid and start tick, every 2 s)."""
    if not sys.platform.startswith("linux"):
        return None
    kwargs: dict[str, Any] = {"death_signal": signal.SIGTERM} if popen is not subprocess.Popen else {}
    try:
        proc = popen([sys.executable, "-S", "-c", GUARD_SOURCE, str(pgid), str(os.getpid()), str(POLL_S),
                      mark or "", str(roster or "")],
                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True, **kwargs)
    except OSError as exc:
        log.debug("no guard for process group %d: %s", pgid, exc)
        return None
    line = proc.stdout.readline() if proc.stdout is not None else b""
    if proc.stdout is not None:
        proc.stdout.close()
    if not line.startswith(b"ready"):
        log.debug("the guard of process group %d did not start", pgid)
        return None
    return Guard(proc, pgid)
