"""memwatch: the memory watchdog of the benchmark suite, usable on its own.

It samples a runtime's memory several times a second through probes (NVML, the process tree's
RSS, a container's cgroup, the Windows shared GPU memory counter), trips on a policy (spilled or
shared memory above the baseline, a device or host memory ceiling), stops the runtime within a
second, and reports the trip and the memory timeline as a pydantic model.

    from memwatch import Watchdog, Policy, default_probes
    with Watchdog(Policy(spill_gb=1.5), default_probes(pid=p.pid), stop=p.kill) as wd:
        ...
    wd.report.model_dump(mode="json")

Command line: ``python -m memwatch --pid N | --container ID | -- CMD ARGS...``.
"""

from __future__ import annotations

from typing import Any

from memwatch.cgroup import CgroupProbe
from memwatch.monitor import Watchdog
from memwatch.nvml import NvmlProbe
from memwatch.policy import GIB, Policy
from memwatch.probe import Probe
from memwatch.process_tree import ProcessTreeProbe
from memwatch.report import ProbeStatus, Timeline, TripEvent, WatchdogReport
from memwatch.windows import WindowsSharedGpuProbe

__version__ = "0.1.0"

__all__ = [
    "GIB",
    "CgroupProbe",
    "NvmlProbe",
    "Policy",
    "Probe",
    "ProbeStatus",
    "ProcessTreeProbe",
    "Timeline",
    "TripEvent",
    "Watchdog",
    "WatchdogReport",
    "WindowsSharedGpuProbe",
    "default_probes",
]


def default_probes(
    pid: int | None = None, container_id: str | None = None, docker_client: Any = None,
    own: Any = None,
) -> list[Probe]:
    """Every probe that fits the target; those that cannot run here report why in the report.

    A process: its tree's RSS. A container: its cgroup (``docker_client``: reuse the caller's
    Docker SDK client). Always: NVML and the Windows counter. ``own``: a callable giving the pids of
    the caller's other runtimes (NVML counts their memory as its own, not as other processes').
    """
    probes: list[Probe] = [NvmlProbe(own=own)]
    if pid is not None:
        probes.append(ProcessTreeProbe(pid))
    if container_id is not None:
        probes.append(CgroupProbe(container_id, docker_client=docker_client))
    probes.append(WindowsSharedGpuProbe())
    return probes
