"""Launcher registry: `local` (a child process group), `docker` (a container), `external` (a
server the suite did not start, `suite bench --url`).

`get_launcher(name)` answers an unknown name with the list of known ones. `launcher_for(runtime,
"auto")` chooses per arm: local when the runtime has a local recipe for this platform, else Docker
when an engine answers (with the NVIDIA runtime for a GPU arm); when neither fits, an
`UnavailableLauncher` whose every call raises `EnvironmentUnavailable` with one line saying what
the arm needs and what this machine lacks. `local` or `docker` forces one, with the same check.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from suite.errors import EnvironmentUnavailable, SuiteError
from suite.launchers.base import Launcher, LaunchSpec, ModelPath, RunningRuntime

if TYPE_CHECKING:
    from suite.definitions import RuntimeDefinition

log = logging.getLogger(__name__)

# name -> "module:Class"; imported lazily so that Docker's SDK is loaded only when used.
LAUNCHERS: dict[str, str] = {
    "local": "suite.launchers.local:LocalLauncher",
    "docker": "suite.launchers.docker:DockerLauncher",
}
CHOICES = ("auto", "local", "docker")  # what --launcher / LAUNCHER accept


def get_launcher(name: str) -> Launcher:
    target = LAUNCHERS.get(name)
    if target is None:
        known = sorted({*LAUNCHERS, "auto"})
        raise SuiteError(f"unknown launcher {name!r}; known: {', '.join(known)}")
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()


# ---------------------------------------------------------------- choosing a launcher per arm

@dataclass
class Machine:
    """What this machine offers to launchers; each fact probed once, when first asked."""

    docker_timeout_s: int = 5

    @cached_property
    def gpu(self) -> tuple[str | None, float | None, str | None]:
        """(name of the first NVIDIA GPU, its memory in GB, why there is none)."""
        from suite import gpu

        lib, reason = gpu.nvml()
        if lib is None:
            return None, None, "no NVIDIA driver"
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(0)
            name = lib.nvmlDeviceGetName(handle)
            total = lib.nvmlDeviceGetMemoryInfo(handle).total / 1e9
            return (name.decode() if isinstance(name, bytes) else str(name)), total, None
        except Exception as exc:  # noqa: BLE001 - a driver without a usable device
            return None, None, f"no usable NVIDIA GPU ({exc})"

    @cached_property
    def gpu_count(self) -> int:
        """NVIDIA GPUs this machine has (0 without a driver)."""
        from suite import gpu

        return gpu.device_count()

    @cached_property
    def docker(self) -> tuple[bool, bool, str | None]:
        """(an engine answers, it has the NVIDIA runtime, why not)."""
        try:
            import docker

            client = docker.from_env(timeout=self.docker_timeout_s)
            client.ping()
        except Exception as exc:  # noqa: BLE001 - no SDK, no socket, an engine that does not answer
            log.debug("Docker engine not reachable: %s", exc)
            return False, False, "no Docker engine"
        from suite.launchers.docker import nvidia_runtime_present

        nvidia = nvidia_runtime_present(client)
        client.close()
        return True, nvidia, None if nvidia else "Docker without the NVIDIA runtime"


_MACHINE: Machine | None = None


def machine() -> Machine:
    global _MACHINE
    if _MACHINE is None:
        _MACHINE = Machine()
    return _MACHINE


class UnavailableLauncher(Launcher):
    """The launcher of an arm that cannot run here: every call says what it needs and lacks."""

    name = "none"
    can_run = False

    def __init__(self, reason: str, wanted: str = "auto"):
        self.reason = reason
        self.wanted = wanted

    def check_available(self) -> None:
        raise EnvironmentUnavailable(self.reason)

    def prepare(self, runtime: RuntimeDefinition, model_path: ModelPath | None = None) -> None:
        raise EnvironmentUnavailable(self.reason)

    def start(self, spec: LaunchSpec) -> RunningRuntime:
        raise EnvironmentUnavailable(self.reason)


def _has_docker_image(runtime: RuntimeDefinition) -> bool:
    return runtime.docker is not None


def _gpu_required(runtime: RuntimeDefinition) -> bool:
    return "cpu" not in runtime.platforms


def _gpu_phrase(gpu_memory_gb: float | None, gpus: int = 1) -> str:
    if gpus > 1:
        return f"{gpus} NVIDIA GPUs of one host" + (f" ({gpu_memory_gb:g} GB class)" if gpu_memory_gb else "")
    return f"an NVIDIA GPU ({gpu_memory_gb:g} GB class)" if gpu_memory_gb else "an NVIDIA GPU"


def launcher_for(runtime: RuntimeDefinition, requested: str = "auto", gpu_memory_gb: float | None = None,
                 cache: dict[str, Launcher] | None = None, m: Machine | None = None, gpus: int = 1) -> Launcher:
    """The launcher an arm runs with here, or an UnavailableLauncher saying why none fits.

    `requested`: auto (local where the runtime has a local recipe for this platform, else Docker
    where an engine answers, with the NVIDIA runtime for a GPU arm), local or docker (forced).
    `gpu_memory_gb`: the GPU memory the model needs (the card's), named in the reason. `gpus`: how
    many GPUs the arm spreads over (its tensor- times pipeline-parallel degree).
    """
    if requested not in CHOICES:
        raise SuiteError(f"unknown launcher {requested!r}; known: {', '.join(CHOICES)}")
    m = m or machine()
    cache = cache if cache is not None else {}

    def real(name: str) -> Launcher:
        if name not in cache:
            cache[name] = get_launcher(name)
        return cache[name]

    needs_gpu = _gpu_required(runtime)
    gpu_name, gpu_gb, gpu_lack = m.gpu if needs_gpu else (None, None, None)
    if needs_gpu and gpu_name and gpu_memory_gb and gpu_gb is not None and gpu_gb < 0.9 * gpu_memory_gb:
        gpu_lack = f"an NVIDIA GPU of {gpu_gb:.0f} GB ({gpu_name})"
    if needs_gpu and gpu_name and gpus > 1 and m.gpu_count < gpus:
        gpu_lack = f"{m.gpu_count} NVIDIA GPU{'s' if m.gpu_count != 1 else ''} (the arm spreads over {gpus})"
    local_ok = runtime.local is not None and gpu_lack is None
    if requested in ("auto", "local") and local_ok:
        return real("local")
    if requested == "local":
        if runtime.local is None:
            why = ("has no local install recipe (only a Docker image): run it with --launcher docker "
                   "or LAUNCHER=auto" if _has_docker_image(runtime) else "has no local install recipe")
            return UnavailableLauncher(f"needs the Docker launcher: runtime {runtime.name!r} {why}", "local")
        return UnavailableLauncher(f"needs {_gpu_phrase(gpu_memory_gb, gpus)}; this machine has {gpu_lack}: "
                                   "see `suite doctor`", "local")
    if requested == "auto" and runtime.local is not None and gpu_lack is not None:
        # A local recipe needs the GPU alone (Docker would need it too): say only that.
        return UnavailableLauncher(f"needs {_gpu_phrase(gpu_memory_gb, gpus)}; this machine has {gpu_lack}: "
                                   "see `suite doctor`", requested)
    # Docker: auto without a local way, or forced.
    if not _has_docker_image(runtime):
        return UnavailableLauncher(f"needs a local install recipe or a Docker image; runtime {runtime.name!r} "
                                   "has neither", requested)
    engine, nvidia, docker_lack = m.docker
    needs_nvidia_runtime = needs_gpu or (runtime.docker is not None and runtime.docker.gpu == "required")
    lacks = []
    if needs_gpu and gpu_lack:
        lacks.append(gpu_lack)
    if not engine:
        lacks.append("no Docker engine")
    elif needs_nvidia_runtime and not nvidia:
        lacks.append("Docker without the NVIDIA runtime")
    if not lacks:
        return real("docker")
    needs = (f"{_gpu_phrase(gpu_memory_gb, gpus)} and Docker with the NVIDIA runtime" if needs_nvidia_runtime
             else "Docker (it has no local install recipe)" if runtime.local is None else "Docker")
    return UnavailableLauncher(f"needs {needs}; this machine has {' and '.join(lacks)}: see `suite doctor`",
                               requested)



# ---------------------------------------------------------------- what a dead suite left behind

def reap_orphans(m: Machine | None = None) -> list[str]:
    """End what suite processes that are gone left behind; returns one line per thing ended.

    Runs before the bench takes the GPU (`gpu.exclusive_device` refuses while another process
    holds it): the runtimes of stale leases (`local.reap_stale_leases`; a local runtime's workers
    survive its leader's parent-death signal) and the containers of a gone owner
    (`docker.remove_orphan_containers`, where an engine answers: a container gets no parent-death
    signal at all). Best effort: a reaper that cannot run says why in the debug log.
    """
    from suite.launchers.local import reap_stale_leases

    ended: list[str] = []
    try:
        ended += reap_stale_leases()
    except OSError as exc:
        log.debug("stale leases not reaped: %s", exc)
    m = m or machine()
    engine, _, _ = m.docker
    if engine:
        try:
            import docker

            from suite.launchers.docker import remove_orphan_containers

            client = docker.from_env(timeout=max(m.docker_timeout_s, 30))
            try:
                count = remove_orphan_containers(client)
            finally:
                client.close()
            ended += [f"{count} container(s)"] if count else []
        except Exception as exc:  # noqa: BLE001 - best effort: the start reaps again
            log.debug("orphan containers not reaped: %s", exc)
    return ended
