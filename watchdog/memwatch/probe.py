"""The probe contract: one source of memory readings (NVML, a process tree, a cgroup, ...).

A probe says whether it can run here (``available`` returns ``(False, reason)`` when it cannot:
"no NVIDIA driver", "not Windows or WSL", ...), and ``sample`` returns its current readings as
``{metric name: value}`` (bytes, or percent for ``*_pct``). ``roles`` tags the metrics that the
policy may trip on (see ``memwatch.policy``). Probes that know the runtime's processes answer
``current_pids``; probes that need them (per-process GPU memory) receive the watchdog's pid source
through ``attach_pids``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

log = logging.getLogger(__name__)

PidSource = Callable[[], "Iterable[int] | None"]


class Probe(abc.ABC):
    """One source of memory readings, sampled by the watchdog several times a second."""

    name: ClassVar[str] = "probe"

    def __init__(self) -> None:
        self._pid_source: PidSource | None = None

    @abc.abstractmethod
    def available(self) -> tuple[bool, str | None]:
        """(True, None) when the probe can sample here; else (False, the reason)."""

    @abc.abstractmethod
    def sample(self) -> dict[str, float]:
        """Current readings: metric name -> bytes (or percent for ``*_pct`` metrics)."""

    def roles(self, metric: str) -> tuple[str, ...]:
        """The policy roles of one metric ("spill", "host", "device"); () for information only."""
        return ()

    def current_pids(self) -> list[int] | None:
        """The runtime's processes as this probe sees them; None when it does not know them."""
        return None

    def attach_pids(self, source: PidSource) -> None:
        """Give the probe a callable returning the runtime's current pids (used if it has none)."""
        if self._pid_source is None:
            self._pid_source = source

    def details(self) -> dict[str, Any]:
        """Extra facts for the report (device names, per-process peaks, the cgroup path, ...)."""
        return {}

    def close(self) -> None:
        """Release what the probe holds (NVML handle, reader process). Idempotent."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"
