"""The configuration signature: what exactly produced a result.

It covers the model file (checksum, revision), the runtime (name, version, image digest), the
command line, the env (secrets redacted), the controls, the suite version, the prompt-set hash and
the hardware. Its `digest` is a SHA-256 over all of that, so two results with the same digest came
from the same configuration. Every run record and every extracted fact carries it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

import suite

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL|AUTH)", re.I)
REDACTED = "<redacted>"


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Env with the values of secret-looking names replaced."""
    return {k: (REDACTED if SECRET_NAME.search(k) else v) for k, v in sorted(env.items())}


def redact_args(args: list[str]) -> list[str]:
    """Command line with values following secret-looking flags replaced."""
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if a.startswith("--") and SECRET_NAME.search(a):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(a)
    return out


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


class Signature(BaseModel):
    """The exact configuration behind a result. `digest` hashes every other field."""

    model: str
    model_format: str
    model_sha256: str | None
    model_revision: str | None
    runtime: str
    runtime_version: str | None
    image_digest: str | None = None
    launcher: str
    command: list[str]
    env: dict[str, str]
    controls: list[str]
    suite_version: str = suite.__version__
    prompt_set_hash: str
    hardware: Hardware
    digest: str = ""

    def with_digest(self) -> "Signature":
        body = self.model_dump(mode="json", exclude={"digest"})
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return self.model_copy(update={"digest": hashlib.sha256(canonical.encode()).hexdigest()})


def hash_files(paths: list[Path]) -> str:
    """SHA-256 over files' names and contents (prompt sets), order-independent."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def command_version(command: list[str]) -> str | None:
    """First non-empty output line of a version command, or None."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if line.strip():
            return line.strip()[:200]
    return None
