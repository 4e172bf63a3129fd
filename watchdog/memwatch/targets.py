"""What the watchdog stops: a process group it started, an existing process tree, a container.

Each target gives the watchdog its two callables: ``stop()`` (kill at once) and ``pids()`` (the
processes that must be gone). Launchers that manage their own processes pass their own instead.
A target remembers every process of its tree as it saw it (pid and start time): a pid seen long
ago is signalled only while it still names that process, never after the system gave the pid to
another one.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

import psutil

log = logging.getLogger(__name__)


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants that still exist, as processes (each knows when it started)."""
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return []


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants that still exist."""
    return [p.pid for p in _tree(pid)]


def _started(proc: psutil.Process) -> float | None:
    """When ``proc`` started, as psutil recorded it when the process was first seen."""
    try:
        return proc.create_time()  # cached by psutil from the first read
    except psutil.Error:
        return None


def _kill(proc: psutil.Process, sig: int, started: float | None = None) -> bool:
    """Signal ``proc`` only if its pid still names the process seen (same start time, read now
    from a fresh look at the pid); True if sent. psutil's own check is not enough: once it saw a
    process gone it no longer compares start times, and would signal whoever took the pid since.
    Where the kernel has pidfds, the process is held by one from the comparison to the signal."""
    started = started if started is not None else _started(proc)
    if started is None:
        return False
    fd: int | None = None
    try:
        try:
            fd = os.pidfd_open(proc.pid)
        except ProcessLookupError:
            return False
        except (AttributeError, OSError):
            fd = None
        if psutil.Process(proc.pid).create_time() != started:
            return False  # the pid names another process now
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(proc.pid, sig)
        return True
    except (psutil.Error, ProcessLookupError, PermissionError):
        return False
    finally:
        if fd is not None:
            os.close(fd)


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal ``pid``, its descendants, and its process group when it leads one."""
    members = _tree(pid)
    try:
        if members and members[0].is_running() and os.getpgid(pid) == pid:
            os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in members:
        _kill(p, sig)


class _Members:
    """Every process seen in a tree, with its start time: a pid seen long ago is signalled only
    while it still names the same process (never a pid the system gave to someone else since)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[psutil.Process, float]] = {}

    def add(self, procs: list[psutil.Process]) -> None:
        for p in procs:
            started = _started(p)
            if started is None:
                continue
            known = self._seen.get(p.pid)
            if known is None or known[1] != started:  # a new pid, or a reused one of the same tree
                self._seen[p.pid] = (p, started)

    def alive(self) -> list[int]:
        from memwatch.monitor import pids_alive

        return pids_alive(p.pid for p, started in self._seen.values() if _same(p.pid, started))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for p, started in list(self._seen.values()):
            _kill(p, sig, started)


def _same(pid: int, started: float) -> bool:
    """Whether ``pid`` runs and is the process that started at ``started``."""
    try:
        return psutil.Process(pid).create_time() == started
    except psutil.Error:
        return False


class ProcessGroupTarget:
    """A command started in its own process group (session), stopped with SIGKILL to the group."""

    def __init__(self, command: Sequence[str], **popen_kwargs: Any) -> None:
        self.command = list(command)
        self.proc = subprocess.Popen(self.command, start_new_session=True, **popen_kwargs)
        self.pid = self.proc.pid
        self._members = _Members()
        self._members.add(_tree(self.pid))

    def pids(self) -> list[int]:
        if self.proc.poll() is None:
            self._members.add(_tree(self.pid))
        return self._members.alive()

    def stop(self) -> None:
        self.pids()  # remember the tree before it is killed
        if self.proc.returncode is None:  # not reaped: the group's id is still this child's
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._members.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("process group %d did not exit after SIGKILL", self.pid)

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)


class ProcessTreeTarget:
    """An existing process and its descendants (the watchdog did not start it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        tree = _tree(pid)
        self._root = tree[0] if tree else None
        self._members = _Members()
        self._members.add(tree)

    def pids(self) -> list[int]:
        if self._root is not None and self._root.is_running():
            self._members.add(_tree(self.pid))
        return self._members.alive()

    def stop(self) -> None:
        self.pids()
        if self._root is not None and self._root.is_running():
            try:
                if os.getpgid(self.pid) == self.pid:
                    os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._members.kill()


class ContainerTarget:
    """A Docker container, killed through the Docker SDK; its processes come from its cgroup."""

    def __init__(self, container_id: str, docker_client: Any = None) -> None:
        import docker  # only when a container is watched

        self.client = docker_client or docker.from_env()
        self.container = self.client.containers.get(container_id)
        self.container_id = self.container.id
        self._probe: Any = None

    def running(self) -> bool:
        try:
            self.container.reload()
        except Exception:
            return False
        return self.container.status in ("running", "restarting", "paused", "created")

    def bind_probe(self, probe: Any) -> None:
        """Use a CgroupProbe's view of the container's processes."""
        self._probe = probe

    def pids(self) -> list[int] | None:
        if self._probe is not None:
            got = self._probe.current_pids()
            if got is not None:
                return got
        return None

    def stop(self) -> None:
        try:
            self.container.kill()
        except Exception as exc:
            if self.running():
                raise
            log.debug("container already stopped: %s", exc)
