"""The launcher contract: how a runtime is started, waited for, and stopped.

A launcher turns a `LaunchSpec` (a runtime definition, a model path, the chosen controls) into a
`RunningRuntime`: a server that answers on `base_url`. It also says what the configuration
signature records about a launch (`version`, `env`, `stack`, `hardware`, `reports`) and which
client talks to it (`client`), so that callers ask the launcher instead of knowing launchers by name. `start` blocks until the runtime is ready
or raises `RuntimeStartError` carrying the log's error line, and leaves nothing running behind it
when it fails. `RunningRuntime.stop` is idempotent and is called on every exit path (context
manager). The watchdog stops a runtime through `RunningRuntime.kill`.
"""

from __future__ import annotations

import abc
import logging
import re
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from suite.errors import RuntimeStartError

if TYPE_CHECKING:
    from suite.client import OpenAIClient
    from suite.definitions import RuntimeDefinition
    from suite.probes import Hardware, Machine, RuntimeStack

log = logging.getLogger(__name__)

# A model the catalog names, "CARD:FORMAT" split in two, as a prepared file or folder (prepared
# first where needed). The catalog sits above the launchers: whoever asks a launcher to prepare a
# runtime passes it (`suite.catalog.prepared_model`) for a recipe that smoke-tests its build.
ModelPath = Callable[[str, str], Path]


@dataclass
class LoraAdapter:
    """A LoRA adapter served beside the base model, under its own name."""

    name: str
    path: Path


@dataclass
class LaunchSpec:
    """Everything a launcher needs to start one configuration of one runtime."""

    runtime: RuntimeDefinition
    model_path: Path
    served_name: str
    seed: int = 42
    context_length: int = 4096
    controls: list[str] = field(default_factory=list)  # names of the control sets applied
    env: dict[str, str] = field(default_factory=dict)  # definition env + controls env + arm env
    args: list[str] = field(default_factory=list)  # controls args + arm args, appended
    lora: list[LoraAdapter] = field(default_factory=list)
    log_path: Path = Path("runtime.log")
    startup_timeout_s: float = 600.0
    refused_patterns: list[str] = field(default_factory=list)  # log lines meaning "refused"
    port: int | None = None  # None: pick a free port


class RunningRuntime(abc.ABC):
    """A started runtime. Use as a context manager so it is stopped on every exit path."""

    base_url: str
    command: list[str]
    log_path: Path
    pid: int | None = None  # host pid of the process group leader (local launcher)
    container_id: str | None = None  # Docker container id (docker launcher)
    image_digest: str | None = None
    startup_s: float | None = None  # seconds from start to ready
    # The key the server wants (`Authorization: Bearer`), where it wants one: an external server's,
    # from SUITE_API_KEY. Clients and probes send it; failure records keep it out of log tails.
    api_key: str | None = None
    # What this launch ran with, as the bench started it (secrets redacted): the controls, the
    # env they and the arm set, and the args they appended.
    launch_controls: list[str] | None = None
    launch_env: dict[str, str] | None = None
    launch_args: list[str] | None = None

    @abc.abstractmethod
    def alive(self) -> bool: ...

    @abc.abstractmethod
    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop gracefully (TERM, then KILL after timeout_s). Idempotent."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop at once (used by the watchdog on a trip). Idempotent."""

    def exit_code(self) -> int | None:
        """The process's return code once it has ended (negative: the signal that ended it); None
        while it runs, or where the launcher cannot tell."""
        return None

    def ended(self) -> str | None:
        """How it ended, in words ("crashed: SIGSEGV (segmentation fault)", "exited with status 1");
        None while it runs, or where the launcher cannot tell."""
        code = self.exit_code()
        return None if code is None else exit_words(code)

    def __enter__(self) -> RunningRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Launcher(abc.ABC):
    """A way to run runtimes: a local process group, or a Docker container."""

    name: ClassVar[str]
    # What the bench asks of a launcher, instead of its name:
    starts_runtimes: ClassVar[bool] = True  # False: it talks to a server it did not start (no restarts)
    runs_children: ClassVar[bool] = False  # True: the runtime runs as this suite's child process tree
    can_run: ClassVar[bool] = True  # False: it stands for an arm that cannot run here, with the reason

    @abc.abstractmethod
    def check_available(self) -> None:
        """Raise EnvironmentUnavailable with the reason when this launcher cannot run here."""

    @abc.abstractmethod
    def prepare(self, runtime: RuntimeDefinition, model_path: ModelPath | None = None) -> None:
        """Install or build the runtime (reused when already there). `model_path` finds the model a
        local install recipe smoke-tests its build on (the definition's `smoke_model`); without it
        the recipe skips its smoke test."""

    @abc.abstractmethod
    def start(self, spec: LaunchSpec) -> RunningRuntime:
        """Start and wait until ready; raise RuntimeStartError (nothing left running) otherwise."""

    # -- what the signature records about a launch -----------------------------------------------
    def version(self, runtime: RuntimeDefinition, rt: RunningRuntime) -> str | None:
        """The runtime's version as this launch has it: what its server reports at `version_path`."""
        return server_version(runtime, rt)

    def features(self, runtime: RuntimeDefinition, rt: RunningRuntime) -> str | None:
        """The runtime's own feature line (the CPU kernel paths it runs): its log's line that the
        definition's `feature_pattern` finds, where it prints one."""
        from suite.probes import feature_line

        return feature_line(rt.log_path, runtime.server.feature_pattern)

    def kernel_path(self, runtime: RuntimeDefinition, rt: RunningRuntime) -> dict[str, str] | None:
        """The kernels the runtime chose (linear, MoE, attention), as its log says: the lines its
        definition's `[kernels]` table names, found in this launch's log; None where it names none."""
        from suite.probes import kernel_path

        log_path = getattr(rt, "log_path", None)  # a runtime started elsewhere (a URL) keeps no log here
        return kernel_path(log_path, runtime.kernels) if log_path is not None else None

    def env(self, runtime: RuntimeDefinition, spec: LaunchSpec) -> dict[str, str]:
        """The env the runtime runs with, beyond the machine's own: the spec's (controls and arm)."""
        return dict(spec.env)

    def stack(self, runtime: RuntimeDefinition, env: dict[str, str]) -> RuntimeStack | None:
        """torch / Triton / CUDA under a Python runtime, where this launcher can ask it; else None."""
        return None

    def hardware(self) -> Hardware:
        """The hardware the runtime runs on: this machine's."""
        from suite.probes import detect_hardware

        return detect_hardware()

    def machine(self) -> Machine | None:
        """Which machine the runtime runs on (host, GPU UUIDs, driver): this one."""
        from suite.probes import detect_machine

        return detect_machine()

    def reports(self) -> dict[str, Any]:
        """Signature fields only this launcher has (an external server's URL and self-reports)."""
        return {}

    def client(self, base_url: str, model: str, **kwargs: Any) -> OpenAIClient:
        """The client the stages talk to the runtime with."""
        from suite.client import OpenAIClient

        return OpenAIClient(base_url, model, **kwargs)


def server_version(runtime: RuntimeDefinition, rt: RunningRuntime) -> str | None:
    """The version string the runtime's server reports (`version_path`, `version_field`), if it does."""
    from suite.client import OpenAIClient
    from suite.errors import SuiteError

    server = runtime.server
    if not server.version_path:
        return None
    try:
        with OpenAIClient(rt.base_url, "", timeout_s=10, api_key=rt.api_key) as c:
            data: Any = c.get_json(server.version_path)
    except SuiteError:
        return None
    for key in (server.version_field or "version").split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return None if data is None else str(data)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_ERROR_HINT = re.compile(r"(error|exception|failed|fatal|refused|abort|cannot|unable|not found|"
                         r"segmentation fault|core dumped|assert|terminate called|traceback)", re.I)
# Lines that only point elsewhere for the cause (vLLM's "Engine core initialization failed. See
# root cause above."): never quoted as the reason while another error line exists.
_WRAPPER = re.compile(r"see root cause above|see the log above", re.I)
# A line a logger marked as information, never as an error, even when it mentions one
# ("INFO 12-01 ... [api_server.py:1] error_handler ready", uvicorn's "INFO:  ... 500 Internal Server
# Error", `level=info`, `[info]`, glog's `I1201 ...`, llama.cpp's timestamped `0.01.234.567 I ...`).
_LEVEL_WORD = re.compile(r"\b(INFO|DEBUG|TRACE|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)\b(?!\s*[=(])")
_INFO_MARK = re.compile(
    r"^\s*\[(info|debug|trace|notice)\]"  # [info] ...
    r"|\blevel[\"']?\s*[=:]\s*[\"']?(info|debug|trace|notice)\b"  # level=info, "level":"info"
    r"|^[IDV]\d{4} \d\d:\d\d"  # glog: I1201 18:00:00.000
    r"|^\d+\.\d+\.\d+\.\d+ [ID] ",  # llama.cpp with timestamps: 0.01.234.567 I ...
    re.I)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# A Python traceback's frame and source lines ('File "x.py", line 3, in f', "raise RuntimeError(",
# the ^^^ markers) quote code, not the failure, even where the code names an error: the message
# is the "SomeError: ..." line that follows them. A process prefix such as vLLM's
# "(EngineCore pid=7)" is read past.
_PROCESS_PREFIX = re.compile(r"^\(\w+ pid=\d+\)\s*")
_TRACEBACK_SOURCE = re.compile(r'^(File "|raise\b|Traceback \(most recent call last\)|[\^~]+$)')


def is_info_line(line: str) -> bool:
    """Whether a log line is marked as information (or debug), whatever words it holds: its first
    level word within its first 40 characters (after a timestamp or a `(APIServer pid=1)` prefix)
    is INFO, DEBUG, TRACE or NOTICE, or it carries `[info]`, `level=info` or a glog `I` prefix."""
    first = _LEVEL_WORD.search(line[:48])
    if first is not None and first.start() <= 40:
        return first[1] in ("INFO", "DEBUG", "TRACE", "NOTICE")
    return bool(_INFO_MARK.search(line))


def find_error_line(log_text: str, patterns: list[str] | None = None) -> str | None:
    """The line of a runtime log that says why it failed, or None when no line reads as an error.

    A line matching one of the definition's refusal patterns wins; else the last line that looks
    like an error and is not marked as information (an INFO line never stands for the cause, nor
    does a traceback's source line such as `raise RuntimeError(`, nor the last line merely for
    being last: a runtime that crashed without a word has no error line, and its log's tail is
    shown instead).
    """
    lines = [_ANSI.sub("", ln).strip() for ln in log_text.splitlines()]
    lines = [ln for ln in lines if ln]
    for pat in patterns or []:
        rx = re.compile(pat)
        for ln in lines:
            if rx.search(ln):
                return ln[:500]
    hinted = [ln for ln in lines if _ERROR_HINT.search(ln) and not is_info_line(ln)
              and not _TRACEBACK_SOURCE.match(_PROCESS_PREFIX.sub("", ln))]
    for ln in reversed(hinted):
        if not _WRAPPER.search(ln):
            return ln[:500]
    if hinted:
        return hinted[-1][:500]
    return None


def log_tail(path: Path | str | None, lines: int = 20, secrets: tuple[str, ...] = ()) -> list[str]:
    """The last `lines` lines of a runtime log (colour codes removed, each cut at 500 characters,
    URL credentials, the suite's secret values and `secrets` replaced); [] when it cannot be read."""
    from suite.secrets import REDACTED, scrub

    if path is None:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    out = [_ANSI.sub("", ln).rstrip()[:500] for ln in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    out = out[-lines:]
    cleaned = []
    for ln in out:
        ln = scrub(ln)
        for secret in secrets:
            if secret and len(secret) >= 4:
                ln = ln.replace(secret, REDACTED)
        cleaned.append(ln)
    return cleaned


# Signals that mean the process itself went wrong (a crash), not that something stopped it.
_FAULTS = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS", "SIGTRAP"}


def exit_signal(returncode: int | None, shell_convention: bool = False) -> str | None:
    """The signal's name ("SIGSEGV") when a process ended by one: a negative return code (a child
    process), or with `shell_convention` 128 + n (a container's exit code)."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else (returncode - 128 if shell_convention and 128 < returncode < 160 else 0)
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_words(returncode: int | None, shell_convention: bool = False) -> str:
    """How a process ended, in words: "crashed: SIGSEGV (segmentation fault)", "was killed by SIGKILL",
    "exited with status 1" (None: "is no longer running")."""
    if returncode is None:
        return "is no longer running"
    name = exit_signal(returncode, shell_convention)
    if name is None:
        return f"exited with status {returncode}"
    if name in _FAULTS:
        try:
            described = (signal.strsignal(signal.Signals[name]) or "").lower()
        except (KeyError, ValueError):
            described = ""
        status = f"; exit status {returncode}" if returncode > 0 else ""
        return f"crashed: {name}" + (f" ({described}{status})" if described or status else "")
    return f"was killed by {name}" + (f" (exit status {returncode})" if returncode > 0 else "")


def wait_until_ready(base_url: str, spec: LaunchSpec, t0: float, gone: Callable[[], str | None]) -> None:
    """Poll the runtime's ready endpoint until it answers 200.

    Raises RuntimeStartError with the log's error line when `gone()` says why the runtime is no
    longer running (e.g. "exited with status 1"), when a refusal pattern appears in its log, or
    when the start-up timeout passes. The caller stops the runtime on any exception.
    """
    runtime = spec.runtime
    url = base_url + runtime.server.ready_path
    refusals = [re.compile(p) for p in spec.refused_patterns]
    deadline = t0 + spec.startup_timeout_s

    def log_text() -> str:
        return spec.log_path.read_text(errors="replace") if spec.log_path.exists() else ""

    with httpx.Client(timeout=5.0) as http:
        while True:
            why = gone()
            if why is not None:
                text = log_text()
                line = find_error_line(text, spec.refused_patterns)
                after = time.monotonic() - t0
                raise RuntimeStartError(f"runtime {runtime.name!r} {why} {after:.1f} s after start, before it was "
                                        f"ready: {line or 'no error line in its log'}",
                                        error_line=line, log_path=str(spec.log_path),
                                        refused=any(rx.search(text) for rx in refusals), ended=why, after_s=after)
            if refusals:
                text = log_text()
                if any(rx.search(text) for rx in refusals):
                    line = find_error_line(text, spec.refused_patterns)
                    raise RuntimeStartError(f"runtime {runtime.name!r} refused to start: {line}",
                                            error_line=line, log_path=str(spec.log_path), refused=True,
                                            after_s=time.monotonic() - t0)
            try:
                if http.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                text = log_text()
                line = find_error_line(text)
                last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), None)
                raise RuntimeStartError(
                    f"runtime {runtime.name!r} not ready after {spec.startup_timeout_s:.0f} s "
                    f"(GET {runtime.server.ready_path}); "
                    + (f"error line: {line}" if line else f"last log line: {last[:500] if last else '(empty log)'}"),
                    error_line=line, log_path=str(spec.log_path), after_s=time.monotonic() - t0, timed_out=True)
            time.sleep(0.25)
