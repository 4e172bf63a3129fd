"""NVIDIA GPUs through NVML (nvidia-ml-py): device memory, per-process memory, utilisation.

Per device ``i``: ``gpu{i}_used_bytes`` and ``gpu{i}_total_bytes`` (``nvmlMemory_v2``: "used"
excludes the driver's reserved memory), ``gpu{i}_util_pct``, ``gpu{i}_power_w`` (``nvmlDeviceGetPowerUsage``)
and ``gpu{i}_energy_j`` (``nvmlDeviceGetTotalEnergyConsumption``: joules since the driver loaded,
so the difference of two samples is the energy between them; the details keep each device's first
and last reading). Either is left out on a GPU that does not report it. Across devices: ``gpu_proc_bytes``,
the device memory that NVML attributes to the runtime's processes (its pids, host pid numbers),
``gpu_own_proc_bytes`` for the processes of other runtimes the same caller started and named
(``own``: a bench's later launches of the same arm, which are not someone else's), and
``gpu_other_proc_bytes`` for every other process on the GPUs. The report's details keep each
process's peak. ``gpu{i}_used_bytes`` carries the "device" role: the policy's device ceiling and
device growth apply to it, one GPU at a time.
"""

from __future__ import annotations

import logging
from typing import Any

from memwatch.probe import PidSource, Probe

log = logging.getLogger(__name__)


class NvmlProbe(Probe):
    """Memory and utilisation of NVIDIA GPUs, with per-process attribution."""

    name = "nvml"

    def __init__(self, pids: PidSource | None = None, devices: list[int] | None = None,
                 own: PidSource | None = None) -> None:
        super().__init__()
        self._pid_source = pids
        # the caller's own other processes (its later launches): never counted as other processes
        self._own_source = own
        self.device_indices = devices
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._devices: list[dict[str, Any]] = []
        self._driver: str | None = None
        self._mem_v2 = True
        self._util_ok: dict[int, bool] = {}
        self._power_ok: dict[int, bool] = {}
        self._energy_ok: dict[int, bool] = {}
        self._energy_first_mj: dict[int, int] = {}
        self._energy_last_mj: dict[int, int] = {}
        self._runtime_peak: dict[int, int] = {}
        self._runtime_last: dict[int, int] = {}
        self._other_peak: dict[int, int] = {}
        self._initialised = False

    def available(self) -> tuple[bool, str | None]:
        try:
            import pynvml
        except ImportError:
            return False, "nvidia-ml-py is not installed"
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            return False, "no NVIDIA driver (NVML library not found)"
        except pynvml.NVMLError_DriverNotLoaded:
            return False, "no NVIDIA driver loaded"
        except pynvml.NVMLError as exc:
            return False, f"no NVIDIA driver (NVML: {exc})"
        self._nvml = pynvml
        self._initialised = True
        try:
            count = pynvml.nvmlDeviceGetCount()
            indices = self.device_indices if self.device_indices is not None else list(range(count))
            if not indices or count == 0:
                self.close()
                return False, "no NVIDIA device"
            for i in indices:
                if i >= count:
                    self.close()
                    return False, f"no NVIDIA device {i} (found {count})"
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                self._handles.append((i, h))
                name = pynvml.nvmlDeviceGetName(h)
                self._devices.append(
                    {
                        "index": i,
                        "name": name.decode() if isinstance(name, bytes) else name,
                        "total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                    }
                )
            drv = pynvml.nvmlSystemGetDriverVersion()
            self._driver = drv.decode() if isinstance(drv, bytes) else drv
        except pynvml.NVMLError as exc:
            self.close()
            return False, f"NVML failed: {exc}"
        return True, None

    def _memory(self, h: Any) -> Any:
        nv = self._nvml
        if self._mem_v2:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            except (nv.NVMLError, TypeError, AttributeError):
                self._mem_v2 = False  # older driver: fall back to v1 ("used" includes reserved)
        return nv.nvmlDeviceGetMemoryInfo(h)

    def _processes(self, h: Any) -> dict[int, int]:
        nv = self._nvml
        out: dict[int, int] = {}
        for getter in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                procs = getter(h)
            except nv.NVMLError:
                continue
            for p in procs:
                used = p.usedGpuMemory
                if used is None:  # not available on this platform (WSL, some containers)
                    used = 0
                out[int(p.pid)] = max(out.get(int(p.pid), 0), int(used))
        return out

    def sample(self) -> dict[str, float]:
        nv = self._nvml
        runtime_pids: set[int] = set()
        if self._pid_source is not None:
            runtime_pids = set(self._pid_source() or ())
        own_pids = set(self._own_source() or ()) if self._own_source is not None else set()
        values: dict[str, float] = {}
        proc_total = 0
        other_total = 0
        own_total = 0
        self._runtime_last = {}
        for i, h in self._handles:
            mem = self._memory(h)
            values[f"gpu{i}_used_bytes"] = float(mem.used)
            values[f"gpu{i}_total_bytes"] = float(mem.total)
            if self._util_ok.get(i, True):
                try:
                    values[f"gpu{i}_util_pct"] = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
                except nv.NVMLError:
                    self._util_ok[i] = False
            if self._power_ok.get(i, True):
                try:
                    values[f"gpu{i}_power_w"] = float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0
                except nv.NVMLError:
                    self._power_ok[i] = False
            if self._energy_ok.get(i, True):
                try:
                    mj = int(nv.nvmlDeviceGetTotalEnergyConsumption(h))
                    self._energy_first_mj.setdefault(i, mj)
                    self._energy_last_mj[i] = mj
                    values[f"gpu{i}_energy_j"] = mj / 1000.0
                except nv.NVMLError:
                    self._energy_ok[i] = False
            for pid, used in self._processes(h).items():
                if pid in runtime_pids:
                    proc_total += used
                    self._runtime_last[pid] = self._runtime_last.get(pid, 0) + used
                elif pid in own_pids:
                    own_total += used
                else:
                    other_total += used
                    self._other_peak[pid] = max(self._other_peak.get(pid, 0), used)
        for pid, used in self._runtime_last.items():
            self._runtime_peak[pid] = max(self._runtime_peak.get(pid, 0), used)
        values["gpu_proc_bytes"] = float(proc_total)
        values["gpu_other_proc_bytes"] = float(other_total)
        if self._own_source is not None:
            values["gpu_own_proc_bytes"] = float(own_total)
        return values

    def roles(self, metric: str) -> tuple[str, ...]:
        if metric.startswith("gpu") and metric.endswith("_used_bytes") and metric[3:-11].isdigit():
            return ("device",)
        return ()

    def details(self) -> dict[str, Any]:
        return {
            "driver": self._driver,
            "devices": self._devices,
            "memory_info": "v2" if self._mem_v2 else "v1",
            "runtime_process_peak_bytes": {str(k): v for k, v in sorted(self._runtime_peak.items())},
            "runtime_process_last_bytes": {str(k): v for k, v in sorted(self._runtime_last.items())},
            "other_process_peak_bytes": {str(k): v for k, v in sorted(self._other_peak.items())},
            # per device: the energy counter's first and last reading (mJ) and the joules between them
            "energy_mj_first": {str(k): v for k, v in sorted(self._energy_first_mj.items())},
            "energy_mj_last": {str(k): v for k, v in sorted(self._energy_last_mj.items())},
            "energy_j": (round(sum(self._energy_last_mj[k] - self._energy_first_mj[k]
                                   for k in self._energy_last_mj) / 1000.0, 3) if self._energy_last_mj else None),
        }

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._initialised = False
