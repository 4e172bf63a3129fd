"""What the machine and a runtime's stack are, as probed at launch: the hardware (CPU, cores,
memory, GPU, driver, CUDA), the torch / Triton / CUDA versions under a Python runtime, a command's
version line, the runtime's own feature line in its log, and the state of the compile caches its
definition declares."""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from suite.definitions import CompileCacheSpec, KernelsSpec


class Hardware(BaseModel):
    cpu: str
    cores: int
    memory_gb: float
    gpu: str | None = None
    gpu_driver: str | None = None
    cuda: str | None = None
    os: str


@lru_cache(maxsize=1)


def detect_hardware() -> Hardware:
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = driver = cuda = None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        gpu = pynvml.nvmlDeviceGetName(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        version = pynvml.nvmlSystemGetCudaDriverVersion()
        cuda = f"{version // 1000}.{(version % 1000) // 10}"
        pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver here: a CPU machine
        pass
    return Hardware(
        cpu=cpu,
        cores=os.cpu_count() or 1,
        memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
        gpu=gpu,
        gpu_driver=driver,
        cuda=cuda,
        os=f"{platform.system()} {platform.release()}",
    )


class Machine(BaseModel):
    """Which machine ran a record, apart from its configuration (the signature's digest leaves it
    out): two GPUs of one model and driver are one configuration, and a difference between their
    answers is a finding about the machines, which only this can show."""

    host: str = Field(description="the host's name")
    gpu_uuids: list[str] = Field(default_factory=list, description="every NVIDIA GPU's UUID, in index order")
    gpu_names: list[str] = Field(default_factory=list, description="their names, in the same order")
    gpu_driver: str | None = Field(default=None, description="the NVIDIA driver's version")


@lru_cache(maxsize=1)
def detect_machine() -> Machine:
    """This machine's identity: its host name and, where NVML answers, its GPUs' UUIDs and driver."""
    uuids: list[str] = []
    names: list[str] = []
    driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = str(pynvml.nvmlSystemGetDriverVersion())
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuids.append(str(pynvml.nvmlDeviceGetUUID(handle)))
                names.append(str(pynvml.nvmlDeviceGetName(handle)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver here: a CPU machine
        pass
    return Machine(host=socket.gethostname(), gpu_uuids=uuids, gpu_names=names, gpu_driver=driver)


class RuntimeStack(BaseModel):
    """Versions under a Python runtime (vLLM): what its own interpreter reports."""

    torch: str | None = Field(default=None, description="torch.__version__")
    triton: str | None = Field(default=None, description="triton.__version__ (None: not installed)")
    cuda: str | None = Field(default=None, description="torch.version.cuda (None: a CPU build of torch)")


class CacheState(BaseModel):
    """One compile/autotune cache folder the runtime uses, as found at launch."""

    path: str
    state: Literal["absent", "empty", "non-empty"]
    files: int = Field(default=0, description="files in it (counted up to a limit)")


_STACK_PROBE = (
    "import json, torch\n"
    "try:\n import triton; tv = triton.__version__\nexcept Exception: tv = None\n"
    "print(json.dumps({'torch': torch.__version__, 'triton': tv, 'cuda': torch.version.cuda}))"
)


def probe_runtime_stack(python: Path, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> RuntimeStack | None:
    """torch / Triton / CUDA versions as the runtime's own interpreter reports them; None without torch."""
    if not python.is_file():
        return None
    try:
        out = subprocess.run([str(python), "-c", _STACK_PROBE], capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, **(env or {})})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    for line in reversed(out.stdout.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return RuntimeStack(**{k: (str(v) if v is not None else None) for k, v in data.items()
                                   if k in ("torch", "triton", "cuda")})
    return None


def cache_dirs(caches: CompileCacheSpec, env: dict[str, str], home: Path | None = None,
               user: str | None = None) -> dict[str, Path]:
    """The compile/autotune cache folders a runtime with this env uses, by their recorded names:
    each declared one with a `default` (its env variable over that default; `{cache_home}` is
    $XDG_CACHE_HOME of the env, else ~/.cache)."""
    home = home or Path.home()
    user = user or os.environ.get("USER") or os.environ.get("LOGNAME") or "user"
    cache_home = env["XDG_CACHE_HOME"].rstrip("/") if env.get("XDG_CACHE_HOME") else "~/.cache"
    out: dict[str, Path] = {}
    for d in caches.dirs:
        if d.recorded_as is None or d.default is None:
            continue
        value = env.get(d.env) or d.default.format(user=user, cache_home=cache_home)
        out[d.recorded_as] = Path(str(home) + value[1:]) if value.startswith("~") else Path(value)
    return out


def cache_state(paths: dict[str, Path], limit: int = 10_000) -> dict[str, CacheState]:
    """Whether each cache folder exists and holds files (counted up to `limit`)."""
    out: dict[str, CacheState] = {}
    for name, path in paths.items():
        if not path.is_dir():
            out[name] = CacheState(path=str(path), state="absent")
            continue
        files = 0
        try:
            for p in path.rglob("*"):
                if p.is_file():
                    files += 1
                    if files >= limit:
                        break
        except OSError:
            pass
        out[name] = CacheState(path=str(path), state="non-empty" if files else "empty", files=files)
    return out


def command_version(command: list[str], env: dict[str, str] | None = None, limit: int | None = 200) -> str | None:
    """First non-empty output line of a version command, or None (`env`: its whole environment), cut
    at `limit` characters (None: whole, as a feature line must be: two arms sharing one build must
    read alike)."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if line.strip():
            return line.strip()[:limit] if limit is not None else line.strip()
    return None


KERNEL_VALUE_LIMIT = 160  # characters of one part's kernels kept (a log line is untrusted data)


def kernel_path(log_path: Path, spec: KernelsSpec) -> dict[str, str] | None:
    """The kernels the runtime says it chose, by part (`linear`, `moe`, `attention`): every
    distinct value its definition's `[kernels]` lines find in the log, in the order the log names
    them, joined by " + ". None where the definition declares none or the log names none (a part
    it does not name is left out: a dense model logs no MoE backend)."""
    parts = spec.parts()
    if not parts:
        return None
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    out: dict[str, str] = {}
    for part, lines in parts.items():
        found: list[tuple[int, str]] = []
        for line in lines:
            for m in re.finditer(line.pattern, text, re.MULTILINE):
                if line.value is not None:
                    value = m.expand(line.value)
                else:
                    value = m.group(1) if m.re.groups else m.group(0)
                value = " ".join(value.split())
                if value:
                    found.append((m.start(), value))
        values: list[str] = []
        for _, v in sorted(found):
            if v not in values:
                values.append(v)
        if values:
            out[part] = " + ".join(values)[:KERNEL_VALUE_LIMIT]
    return out or None


def feature_line(log_path: Path, pattern: str | None) -> str | None:
    """The first match of the definition's `feature_pattern` in the runtime's log (group 1), or None."""
    if pattern is None:
        return None
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(pattern, text, re.MULTILINE)
    if found is None:
        return None
    return " ".join((found.group(1) if found.groups() else found.group(0)).split()).strip(" |") or None
