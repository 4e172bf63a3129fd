"""Host memory of a runtime's process tree: the sum of the RSS of a process and its descendants.

On Linux a runtime that overruns its GPU (unified memory, offloading, a CPU fallback) shows it
here, so this is the Linux "spill" signal. Membership is refreshed every ``refresh_s`` seconds
from the members' own ``/proc/<pid>/task/<tid>/children`` lists (one pass over the process table
where the kernel lacks them); between refreshes only the known members' RSS is read (one small
/proc read each), which keeps a 10 Hz watch cheap. Members stay tracked after their parent exits
(orphans re-parented to init are still the runtime's). RSS counts pages shared between members
more than once, so a tree of forked workers reads high: thresholds are relative to the baseline.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import psutil

from memwatch.probe import Probe

log = logging.getLogger(__name__)


class ProcessTreeProbe(Probe):
    """RSS of the process ``pid`` and all its descendants (psutil)."""

    name = "process_tree"

    def __init__(self, pid: int, refresh_s: float = 0.5) -> None:
        super().__init__()
        self.pid = int(pid)
        self.refresh_s = refresh_s
        self._members: dict[int, psutil.Process] = {}
        self._last_refresh = 0.0
        self._peak_procs = 0

    def available(self) -> tuple[bool, str | None]:
        try:
            root = psutil.Process(self.pid)
            root.memory_info()
        except psutil.NoSuchProcess:
            return False, f"no process with pid {self.pid}"
        except psutil.AccessDenied:
            return False, f"no permission to read the memory of pid {self.pid}"
        self._members = {self.pid: root}
        self._refresh()
        return True, None

    def _refresh(self) -> None:
        """Add the descendants of every live member; drop members that exited."""
        found: dict[int, psutil.Process] = {}
        for pid, proc in list(self._members.items()):
            if proc.is_running():
                found[pid] = proc
        descendants = _descendants(list(found))
        for pid in descendants:
            if pid not in found:
                try:
                    found[pid] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    pass
        self._members = found
        self._last_refresh = time.monotonic()

    def sample(self) -> dict[str, float]:
        if time.monotonic() - self._last_refresh >= self.refresh_s:
            self._refresh()
        rss = 0
        count = 0
        for pid, proc in list(self._members.items()):
            try:
                rss += proc.memory_info().rss
                count += 1
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                del self._members[pid]
            except psutil.AccessDenied:
                count += 1
        self._peak_procs = max(self._peak_procs, count)
        return {"host_rss_bytes": float(rss), "host_procs": float(count)}

    def roles(self, metric: str) -> tuple[str, ...]:
        return ("spill", "host") if metric == "host_rss_bytes" else ()

    def current_pids(self) -> list[int] | None:
        alive = []
        for pid, proc in list(self._members.items()):
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive

    def details(self) -> dict[str, Any]:
        return {"root_pid": self.pid, "peak_processes": self._peak_procs}


_HAS_CHILDREN_FILES = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()


def _children_from_task_files(pid: int) -> list[int] | None:
    """Children of every thread of ``pid`` from /proc (Linux with CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return out


def _descendants(roots: list[int]) -> set[int]:
    """All descendants of ``roots``: from the members' children files, else one ppid map."""
    if _HAS_CHILDREN_FILES:
        seen: set[int] = set(roots)
        todo = list(roots)
        while todo:
            kids = _children_from_task_files(todo.pop())
            if kids is None:
                break
            for k in kids:
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
        else:
            return seen - set(roots)
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info["ppid"]
        if ppid is not None:
            children.setdefault(ppid, []).append(proc.pid)
    seen = set(roots)
    todo = list(roots)
    while todo:
        for k in children.get(todo.pop(), ()):
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return seen - set(roots)
