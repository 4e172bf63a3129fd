"""What the watchdog stops: a process group it started, an existing process tree, a container.

Each target gives the watchdog its two callables: ``stop()`` (kill at once) and ``pids()`` (the
processes that must be gone). Launchers that manage their own processes pass their own instead.
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


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants that still exist."""
    try:
        root = psutil.Process(pid)
        return [pid] + [c.pid for c in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal ``pid``, its descendants, and its process group when it leads one."""
    members = tree_pids(pid)
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in members:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


class ProcessGroupTarget:
    """A command started in its own process group (session), stopped with SIGKILL to the group."""

    def __init__(self, command: Sequence[str], **popen_kwargs: Any) -> None:
        self.command = list(command)
        self.proc = subprocess.Popen(self.command, start_new_session=True, **popen_kwargs)
        self.pid = self.proc.pid
        self._members: set[int] = {self.pid}

    def pids(self) -> list[int]:
        now = tree_pids(self.pid) if self.proc.poll() is None else []
        self._members.update(now)
        from memwatch.monitor import pids_alive

        return pids_alive(self._members)

    def stop(self) -> None:
        self.pids()  # remember the tree before it is killed
        kill_tree(self.pid)
        for p in list(self._members):
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
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
        self._members: set[int] = set(tree_pids(pid))

    def pids(self) -> list[int]:
        from memwatch.monitor import pids_alive

        self._members.update(tree_pids(self.pid))
        return pids_alive(self._members)

    def stop(self) -> None:
        self.pids()
        kill_tree(self.pid)
        for p in list(self._members):
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


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
