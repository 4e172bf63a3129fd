"""Exec shim of the local launcher: die with the suite, then become the runtime.

Run as `python -I -S _pdeathsig.py PARENT_PID[:SIGNAL] COMMAND [ARG...]`, never imported. It asks
the kernel to SIGKILL this process (or send SIGNAL) when the thread that forked it ends (prctl
PR_SET_PDEATHSIG; the setting survives exec), exits at once if that parent is gone already (it died before prctl took
effect), and execs COMMAND under the same pid. This replaces a `preexec_fn`, which runs Python
between fork and exec and may deadlock on a lock another thread held at fork time. With a SIGNAL
other than SIGKILL (the guard's SIGTERM), that signal is blocked across the exec: the command
unblocks it once its handler is installed, so one sent while it starts up is delivered to the
handler, not lost to the default action.
Only the standard library is used, in an interpreter started without site packages.
"""

import ctypes
import os
import signal
import sys


def main() -> None:
    who, _, sig = sys.argv[1].partition(":")
    parent, signum, command = int(who), int(sig or 9), sys.argv[2:]
    if signum != 9:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # no prctl: the leases still end what a dead suite left
    if os.getppid() != parent:  # the parent died before prctl: do not outlive it
        os._exit(137)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot start {command[0]}: {exc.strerror or exc}\n")
        os._exit(127)


if __name__ == "__main__":
    main()
