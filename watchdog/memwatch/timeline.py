"""Bounded storage of sampled values, and its reduction to a small timeline for the report.

Samples are kept columnar. When more than ``max_raw`` are held, neighbours are merged in pairs
(keeping each metric's larger value), so memory stays bounded on runs of hours while peaks are
kept. A short ring of the latest raw samples is kept at full resolution for the trip window.
"""

from __future__ import annotations

import logging
from collections import deque

from memwatch.report import Timeline

log = logging.getLogger(__name__)


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


class TimelineRecorder:
    """Collects (time, {metric: value}) samples."""

    def __init__(self, max_raw: int = 12000, ring: int = 50) -> None:
        self.max_raw = max_raw
        self.t: list[float] = []
        self.cols: dict[str, list[float | None]] = {}
        self.count = 0
        self.merged = False
        self.ring: deque[tuple[float, dict[str, float]]] = deque(maxlen=ring)

    def add(self, t: float, values: dict[str, float]) -> None:
        n = len(self.t)
        self.t.append(round(t, 4))
        for name, col in self.cols.items():
            col.append(values.get(name))
        for name, value in values.items():
            if name not in self.cols:
                self.cols[name] = [None] * n + [value]
        self.count += 1
        self.ring.append((t, dict(values)))
        if len(self.t) > self.max_raw:
            self._halve()

    def _halve(self) -> None:
        self.t = self.t[::2]
        for name, col in self.cols.items():
            self.cols[name] = [_max(col[i], col[i + 1] if i + 1 < len(col) else None)
                               for i in range(0, len(col), 2)]
        self.merged = True

    def timeline(self, max_points: int = 600) -> Timeline:
        n = len(self.t)
        if n <= max_points:
            return Timeline(
                t_s=list(self.t),
                metrics={k: list(v) for k, v in self.cols.items()},
                aggregation="max" if self.merged else "none",
                raw_samples=self.count,
                max_points=max_points,
            )
        step = -(-n // max_points)  # ceil
        t_out = [self.t[i] for i in range(0, n, step)]
        metrics: dict[str, list[float | None]] = {}
        for name, col in self.cols.items():
            out: list[float | None] = []
            for i in range(0, n, step):
                best: float | None = None
                for v in col[i : i + step]:
                    best = _max(best, v)
                out.append(best)
            metrics[name] = out
        return Timeline(t_s=t_out, metrics=metrics, aggregation="max", raw_samples=self.count,
                        max_points=max_points)


def window_timeline(samples: list[tuple[float, dict[str, float]]]) -> Timeline:
    """A full-resolution timeline of a few samples (the trip window)."""
    names: list[str] = []
    for _, values in samples:
        for k in values:
            if k not in names:
                names.append(k)
    return Timeline(
        t_s=[round(t, 4) for t, _ in samples],
        metrics={k: [values.get(k) for _, values in samples] for k in names},
        raw_samples=len(samples),
        max_points=len(samples),
    )
