"""One runtime on the GPU at a time: a machine-wide lock, a "GPU is free" check, a memory baseline.

Preflight of every GPU arm: `exclusive_device()` takes a machine-wide lock (`fcntl` on
`$SUITE_CACHE/locks/gpu.lock`; `SUITE_GPU_LOCK` names another file, e.g. one shared by several
users), then asks NVML whether another compute process holds a GPU and refuses with a message
naming the pids when one does. It yields a `DeviceLease` with the device memory in use at that
moment (the baseline). After a runtime is stopped, `wait_for_baseline(baseline, timeout_s)`
polls device memory until it is back to the baseline (within a tolerance) or the timeout ends.

Where no NVIDIA driver answers (a CPU machine), these are no-ops and say why: `exclusive_device`
yields a lease with `reason` set and takes no lock, `device_memory_used()` returns None.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel

from suite.errors import SuiteError
from suite.paths import cache_dir, open_lock

log = logging.getLogger(__name__)

_nvml_lock = threading.Lock()
_nvml_state: tuple[Any, str | None] | None = None  # (pynvml module or None, reason when None)

BASELINE_TOLERANCE_BYTES = 256 * 1024 * 1024


class GpuProcess(BaseModel):
    """A compute process that holds memory on a GPU."""

    pid: int
    device: int
    used_bytes: int | None
    name: str | None = None


class DeviceLease(BaseModel):
    """What `exclusive_device` found when it took the GPU."""

    locked: bool  # whether the machine-wide lock is held
    lock_path: str | None = None
    baseline_bytes: int | None = None  # device memory used when the lease began (all GPUs)
    devices: list[str] = []  # GPU names, in NVML order
    reason: str | None = None  # why this is a no-op (no NVIDIA driver)


class BaselineWait(BaseModel):
    """The outcome of waiting for device memory to return to its baseline."""

    reached: bool
    waited_s: float
    used_bytes: int | None
    baseline_bytes: int | None
    reason: str | None = None


def nvml() -> tuple[Any, str | None]:
    """The initialised NVML binding, or None and the reason it is not available."""
    global _nvml_state
    with _nvml_lock:
        if _nvml_state is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                _nvml_state = (pynvml, None)
            except ImportError:
                _nvml_state = (None, "nvidia-ml-py is not installed")
            except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
                _nvml_state = (None, f"no NVIDIA driver answers ({exc})")
        return _nvml_state


def available() -> tuple[bool, str | None]:
    lib, reason = nvml()
    return lib is not None, reason


def _handles(lib: Any) -> list[Any]:
    return [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]


def device_names() -> list[str]:
    lib, _ = nvml()
    if lib is None:
        return []
    names = []
    for h in _handles(lib):
        name = lib.nvmlDeviceGetName(h)
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def device_memory_used() -> int | None:
    """Bytes of device memory in use, summed over the GPUs; None without an NVIDIA driver."""
    lib, _ = nvml()
    if lib is None:
        return None
    total = 0
    for h in _handles(lib):
        try:
            info = lib.nvmlDeviceGetMemoryInfo(h, version=lib.nvmlMemory_v2)
        except Exception:  # noqa: BLE001 - older drivers know only v1
            info = lib.nvmlDeviceGetMemoryInfo(h)
        total += int(info.used)
    return total


def compute_processes() -> list[GpuProcess]:
    """Processes that hold GPU memory for compute (empty without an NVIDIA driver)."""
    lib, _ = nvml()
    if lib is None:
        return []
    found: list[GpuProcess] = []
    for index, h in enumerate(_handles(lib)):
        for p in lib.nvmlDeviceGetComputeRunningProcesses(h):
            used = getattr(p, "usedGpuMemory", None)
            name = None
            with contextlib.suppress(psutil.Error):
                name = psutil.Process(p.pid).name()
            found.append(GpuProcess(pid=int(p.pid), device=index, used_bytes=int(used) if used else None,
                                    name=name))
    return found


def check_free(ignore_pids: Iterable[int] = ()) -> None:
    """Raise SuiteError naming the pids when another compute process holds a GPU.

    Every process counts, the suite's own children included: before a start none should hold it.
    """
    ignored = {os.getpid(), *ignore_pids}
    others = [p for p in compute_processes() if p.pid not in ignored]
    if not others:
        return
    described = ", ".join(
        f"pid {p.pid}" + (f" ({p.name})" if p.name else "") + f" on GPU {p.device}"
        + (f" holding {p.used_bytes / 2**20:.0f} MiB" if p.used_bytes else "")
        for p in others)
    raise SuiteError(f"the GPU is not free: another compute process holds it: {described}; "
                     "stop it, or run on another machine")


def lock_path() -> Path:
    env = os.environ.get("SUITE_GPU_LOCK")
    return Path(env) if env else cache_dir() / "locks" / "gpu.lock"


@contextlib.contextmanager
def machine_lock(path: Path | None = None, wait_s: float = 0.0) -> Iterator[Path]:
    """Hold the machine-wide GPU lock; refuse (SuiteError naming the holder) after wait_s."""
    path = path or lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fh = open_lock(path)  # never through a symbolic link
    except OSError as exc:
        raise SuiteError(f"{path}: cannot open the GPU lock: {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    fh.seek(0)
                    holder = fh.read().strip() or "another process"
                    raise SuiteError(f"the GPU is taken by another suite run ({holder}; lock {path}); "
                                     "wait for it to finish") from None
                time.sleep(0.5)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        fh.flush()
        yield path
    finally:
        fh.close()  # closing the file releases the lock


@contextlib.contextmanager
def exclusive_device(wait_s: float = 0.0, ignore_pids: Iterable[int] = ()) -> Iterator[DeviceLease]:
    """The GPU for this run alone: the machine-wide lock, then the "no other process" check.

    A no-op (a lease with `reason` set) where no NVIDIA driver answers.
    """
    lib, reason = nvml()
    if lib is None:
        log.info("GPU lock not taken: %s", reason)
        yield DeviceLease(locked=False, reason=reason)
        return
    with machine_lock(wait_s=wait_s) as path:
        check_free(ignore_pids)
        lease = DeviceLease(locked=True, lock_path=str(path), baseline_bytes=device_memory_used(),
                            devices=device_names())
        log.info("GPU lease taken: %s, baseline %.0f MiB", ", ".join(lease.devices),
                 (lease.baseline_bytes or 0) / 2**20)
        yield lease


def wait_for_baseline(baseline_bytes: int | None, timeout_s: float = 120.0,
                      tolerance_bytes: int = BASELINE_TOLERANCE_BYTES, poll_s: float = 0.25) -> BaselineWait:
    """Wait until device memory in use is back to `baseline_bytes` (+ tolerance), up to timeout_s."""
    t0 = time.monotonic()
    used = device_memory_used()
    if used is None or baseline_bytes is None:
        _, reason = nvml()
        return BaselineWait(reached=True, waited_s=0.0, used_bytes=used, baseline_bytes=baseline_bytes,
                            reason=reason or "no baseline was taken")
    while used is not None and used > baseline_bytes + tolerance_bytes:
        if time.monotonic() - t0 >= timeout_s:
            held = ", ".join(f"pid {p.pid}" for p in compute_processes()) or "no compute process listed"
            log.warning("device memory still %.0f MiB above its baseline after %.0f s (%s)",
                        (used - baseline_bytes) / 2**20, timeout_s, held)
            return BaselineWait(reached=False, waited_s=time.monotonic() - t0, used_bytes=used,
                                baseline_bytes=baseline_bytes,
                                reason=f"still {(used - baseline_bytes) / 2**20:.0f} MiB above baseline "
                                       f"after {timeout_s:.0f} s ({held})")
        time.sleep(poll_s)
        used = device_memory_used()
    return BaselineWait(reached=True, waited_s=time.monotonic() - t0, used_bytes=used,
                        baseline_bytes=baseline_bytes)


# -- energy ---------------------------------------------------------------------------------------

class Energy(BaseModel):
    """The GPUs' energy over one measured span (a stage, a control row, a batch mode), from NVML's
    energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded, summed over
    the GPUs): joules, the mean power over the span, and joules per output token."""

    joules: float
    wall_s: float
    mean_power_w: float | None
    output_tokens: int | None = None
    j_per_token: float | None = None  # None: no output token counted
    source: str = "nvml-energy-counter"

    def with_tokens(self, tokens: int | None) -> Energy:
        return self.model_copy(update={"output_tokens": tokens,
                                       "j_per_token": round(self.joules / tokens, 6) if tokens else None})


def energy_mj() -> int | None:
    """The GPUs' energy counters summed (millijoules since the driver loaded), from
    `nvmlDeviceGetTotalEnergyConsumption`; None without a driver or where a GPU has no counter."""
    lib, _ = nvml()
    if lib is None:
        return None
    total = 0
    try:
        for h in _handles(lib):
            total += int(lib.nvmlDeviceGetTotalEnergyConsumption(h))
    except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported on GPUs older than Volta
        log.debug("no energy counter: %s", exc)
        return None
    return total


def power_w() -> float | None:
    """The GPUs' power draw now (watts, summed), from `nvmlDeviceGetPowerUsage` (mW); None without one."""
    lib, _ = nvml()
    if lib is None:
        return None
    try:
        return sum(int(lib.nvmlDeviceGetPowerUsage(h)) for h in _handles(lib)) / 1000.0
    except Exception as exc:  # noqa: BLE001 - not supported on this GPU
        log.debug("no power reading: %s", exc)
        return None


def energy_reader() -> Callable[[], float | None] | None:
    """A function that reads the GPUs' energy counter in joules, or None where there is none
    (no NVIDIA driver, or a GPU without the counter): a stage then records no energy."""
    if energy_mj() is None:
        return None

    def read() -> float | None:
        mj = energy_mj()
        return None if mj is None else mj / 1000.0
    return read


class EnergyMeter:
    """Reads the energy counter when started and when stopped: `with EnergyMeter() as m: ...`, then
    `m.result(tokens)` is the span's `Energy` (None where no counter answers, or it went backwards:
    a driver reload)."""

    def __init__(self) -> None:
        self._start_mj: int | None = None
        self._stop_mj: int | None = None
        self._t0 = self._t1 = 0.0

    def __enter__(self) -> EnergyMeter:
        self._start_mj = energy_mj()
        self._t0 = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_mj = energy_mj() if self._start_mj is not None else None
        self._t1 = time.monotonic()

    def result(self, tokens: int | None = None) -> Energy | None:
        if self._start_mj is None or self._stop_mj is None or self._stop_mj < self._start_mj:
            return None
        joules = (self._stop_mj - self._start_mj) / 1000.0
        wall = self._t1 - self._t0
        return Energy(joules=round(joules, 3), wall_s=round(wall, 4),
                      mean_power_w=round(joules / wall, 2) if wall > 0 else None).with_tokens(tokens)


def ratio_text(value: float | None, base: float | None, what: str) -> str | None:
    """`0.74x the tokens/s`: a figure against the default's, None where either is missing."""
    if value is None or not base:
        return None
    return f"{value / base:.2f}x the {what}"


_PARALLEL_FLAGS = {"--tensor-parallel-size": 0, "-tp": 0, "--pipeline-parallel-size": 1, "-pp": 1}


def parallel_degree(args: Iterable[str]) -> tuple[int, int]:
    """(tensor-parallel, pipeline-parallel) degree a server's arguments ask for (vLLM's and SGLang's
    spellings: `--tensor-parallel-size N`, `--tensor-parallel-size=N`, `-tp N`; the same for the
    pipeline); 1 where not given. The later of two settings wins, as on the server's command line."""
    degree = [1, 1]
    items = list(args)
    for i, a in enumerate(items):
        flag, eq, value = a.partition("=")
        if flag not in _PARALLEL_FLAGS:
            continue
        if not eq:
            value = items[i + 1] if i + 1 < len(items) else ""
        try:
            n = int(value)
        except ValueError:
            raise SuiteError(f"{flag}: expected a number of GPUs, got {value!r}") from None
        if n < 1:
            raise SuiteError(f"{flag}: expected a number of GPUs of at least 1, got {n}")
        degree[_PARALLEL_FLAGS[flag]] = n
    return degree[0], degree[1]


def gpus_needed(args: Iterable[str]) -> int:
    """GPUs a server with these arguments spreads over: tensor- times pipeline-parallel degree."""
    tp, pp = parallel_degree(args)
    return tp * pp


def device_count() -> int:
    """NVIDIA GPUs NVML sees here (0 without a driver)."""
    lib, _ = nvml()
    return len(_handles(lib)) if lib is not None else 0

