"""Other processes' share of the CPUs while a stage ran.

A latency or throughput figure measured beside other busy processes is not the runtime's alone:
llama.cpp's threads, one per core, wait for each other at every step, so one core taken by another
process can slow a whole request many times over (a 2-core machine running a second CPU-bound job
gave llama-cpp-python's extraction 158-332 s per request where it alone took 5-8 s). The meter reads
the machine's busy CPU time (`/proc/stat` through psutil) when a stage starts and ends, and this
suite's own process tree's (the suite, and the runtimes it started, every descendant) once a second
between: a runtime the stage started and stopped again, whose workers die unreaped by their parent
(vLLM's engine core), is counted to its last second, not as another process's. The rest is other
processes'. A stage where they took more than `BUSY_SHARE` of all CPU time is marked busy,
named on the console, in the record and on the page. A runtime the suite did not start as its child
(a container, an external server) counts as other: the meter then says nothing (`result` is None).
"""

from __future__ import annotations

import os
import threading
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


def _own_s() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


class _TreeSampler:
    """Each descendant's CPU seconds, the latest seen (a process is known by pid and start time)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, float], float] = {}

    def sample(self) -> None:
        for child in psutil.Process().children(recursive=True):
            try:
                with child.oneshot():
                    c = child.cpu_times()
                    self.seen[(child.pid, child.create_time())] = c.user + c.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue


class ContentionMeter:
    """`with ContentionMeter() as m: ...`, then `m.result()`: the span's `Contention`, or None where
    the runtime is not this suite's child (`own_runtime=False`) or the span was too short to read."""

    INTERVAL_S = 1.0  # how often the descendants are read between the start and the end

    def __init__(self, own_runtime: bool = True) -> None:
        self.own_runtime = own_runtime
        self._start: tuple[float, float, float] | None = None
        self._stop: tuple[float, float, float] | None = None
        self._tree = _TreeSampler()
        self._base: dict[tuple[int, float], float] = {}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._done.wait(self.INTERVAL_S):
            self._tree.sample()

    def __enter__(self) -> ContentionMeter:
        if self.own_runtime:
            self._tree.sample()
            self._base = dict(self._tree.seen)
            self._start = (time.monotonic(), _busy_s(), _own_s())
            self._thread = threading.Thread(target=self._loop, name="contention-meter", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is not None:
            self._done.set()
            if self._thread is not None:
                self._thread.join()
            self._tree.sample()
            tree = sum(cpu - self._base.get(key, 0.0) for key, cpu in self._tree.seen.items())
            self._stop = (time.monotonic(), _busy_s(), _own_s() + tree)  # own seconds then, plus the tree's since the start

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
