"""Host memory of a runtime's process tree: the sum of the RSS of a process and its descendants.

On Linux a runtime that overruns its GPU (unified memory, offloading, a CPU fallback) shows it
here, so this is the Linux "spill" signal. Membership is refreshed every ``refresh_s`` seconds
(a walk over the process table); between refreshes only the known members' RSS is read (one small
/proc read each), which keeps a 10 Hz watch cheap. Members stay tracked after their parent exits
(orphans re-parented to init are still the runtime's). RSS counts pages shared between members
more than once, so a tree of forked workers reads high: thresholds are relative to the baseline.
"""

from __future__ import annotations

import logging
import time
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
            if not proc.is_running():
                continue
            found[pid] = proc
            try:
                for child in proc.children(recursive=True):
                    found.setdefault(child.pid, child)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
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
