"""Other processes' share of the CPUs while a stage ran.

A latency or throughput figure measured beside other busy processes is not the runtime's alone:
llama.cpp's threads, one per core, wait for each other at every step, so one core taken by another
process can slow a whole request many times over (a 2-core machine running a second CPU-bound job
gave llama-cpp-python's extraction 158-332 s per request where it alone took 5-8 s). The meter reads
the machine's busy CPU time (`/proc/stat` through psutil) and this suite's own process tree's
(the suite, and the runtimes it started, children included) when a stage starts and ends; the rest
is other processes'. A stage where they took more than `BUSY_SHARE` of all CPU time is marked busy,
named on the console, in the record and on the page. A runtime the suite did not start as its child
(a container, an external server) counts as other: the meter then says nothing (`result` is None).
"""

from __future__ import annotations

import os
import time

import psutil
from pydantic import BaseModel

# Other processes' share of all CPU time over a stage above which its timings are marked.
BUSY_SHARE = 0.25


class Contention(BaseModel):
    """Over one stage: the CPUs, the wall time, and other processes' share of all CPU time."""

    cpus: int
    wall_s: float
    others_share: float
    busy: bool

    def text(self) -> str:
        return (f"other processes used {self.others_share:.0%} of the {self.cpus} CPUs' time: "
                f"its timings are not the runtime's alone")


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def _tree_s() -> float:
    """CPU seconds of this process, its reaped children and every live descendant."""
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


class ContentionMeter:
    """`with ContentionMeter() as m: ...`, then `m.result()`: the span's `Contention`, or None where
    the runtime is not this suite's child (`own_runtime=False`) or the span was too short to read."""

    def __init__(self, own_runtime: bool = True) -> None:
        self.own_runtime = own_runtime
        self._start: tuple[float, float, float] | None = None
        self._stop: tuple[float, float, float] | None = None

    def __enter__(self) -> "ContentionMeter":
        if self.own_runtime:
            self._start = (time.monotonic(), _busy_s(), _tree_s())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is not None:
            self._stop = (time.monotonic(), _busy_s(), _tree_s())

    def result(self) -> Contention | None:
        if self._start is None or self._stop is None:
            return None
        wall = self._stop[0] - self._start[0]
        if wall < 0.5:
            return None
        cpus = os.cpu_count() or 1
        others = (self._stop[1] - self._start[1]) - (self._stop[2] - self._start[2])
        share = min(1.0, max(0.0, others / (wall * cpus)))
        return Contention(cpus=cpus, wall_s=round(wall, 2), others_share=round(share, 3), busy=share > BUSY_SHARE)
