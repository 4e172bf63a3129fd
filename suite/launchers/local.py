"""The local launcher: a runtime as a child process group, installed under the cache folder.

`prepare` runs the definition's install recipe (`images/<name>/install.sh PREFIX`) once, into
`$SUITE_CACHE/runtimes/<name>/`, never into the suite's own environment, and reuses it afterwards.
A release pinned by an arm (`version = "X"` in the card, the definition's `[version]` knob) is
installed by the same recipe, with the knob's variable set to X, into `runtimes/<name>@X/`: one
folder per release, installed once and reused, so two releases are measured side by side and
nothing is installed while an arm is measured. The install's full output goes to its log; the
progress display (`suite.progress`) shows the install with its elapsed time and latest line.
`start` renders the command template, starts it in its own session (process group) with its log
in the run folder, and waits until the ready endpoint answers 200 (shown as a step with its
time limit and the log's latest line). A runtime that dies, logs a
refusal pattern, or never gets ready is stopped and reported with its log's error line. Every
started group is killed on exit, on Ctrl-C and on exceptions (context manager + suite.lifetime's registry).

Runtimes also die when the suite dies without running any cleanup (kill -9, a crash): on Linux
the runtime is started with the parent-death signal set to SIGKILL (prctl PR_SET_PDEATHSIG in
the child before exec). That signal fires when the *thread* that forked the child ends, so
runtimes started from another thread than the main one are forked by one long-lived spawner
thread. Each start also leaves a lease, `$SUITE_CACHE/leases/<pid>-<ms>.json` (the runtime's pid,
process start time, process group, command, and the owning suite process's pid and start time),
removed on a clean stop. The next start ends the runtimes of leases whose owner is gone: a
process is ended only when both its pid and its start time match the lease (never by name), and
the suite says so in one log line.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import fcntl
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from suite import progress
from suite.definitions import RuntimeDefinition, render, version_spec
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers.base import (LaunchSpec, Launcher, RunningRuntime, find_error_line, free_port,
                                 wait_until_ready)
from suite.lifetime import REGISTRY
from suite.paths import leases_dir, runtime_prefix
from suite.signature import SECRET_ENV, RuntimeStack, command_version, probe_runtime_stack, redact_args

log = logging.getLogger(__name__)



# ---------------------------------------------------------------- dying with the suite

_PR_SET_PDEATHSIG = 1
_SIGKILL = int(signal.SIGKILL)
try:
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):  # no libc prctl: leases still end stale runtimes
    _prctl = None


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A preexec_fn that makes the kernel SIGKILL the child when its parent (thread) ends."""
    if _prctl is None:
        return None
    prctl = _prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl: do not outlive it
            os.kill(os.getpid(), _SIGKILL)

    return preexec


class _Spawner:
    """Forks runtimes from the main thread, or else from one long-lived daemon thread.

    PR_SET_PDEATHSIG fires when the thread that forked the child exits, not the process: a
    runtime forked from a short-lived worker thread would be killed when that thread ends.
    """

    def __init__(self) -> None:
        self._jobs: "queue.Queue[tuple[list[str], dict[str, Any], concurrent.futures.Future]]" = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, command: list[str], **kwargs: Any) -> subprocess.Popen:
        if threading.current_thread() is threading.main_thread():
            return subprocess.Popen(command, preexec_fn=_die_with_parent(os.getpid()), **kwargs)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True, name="runtime-spawner")
                self._thread.start()
        job: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((command, kwargs, job))
        return job.result()

    def _serve(self) -> None:
        while True:
            command, kwargs, job = self._jobs.get()
            try:
                job.set_result(subprocess.Popen(command, preexec_fn=_die_with_parent(os.getpid()), **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                job.set_exception(exc)


_SPAWNER = _Spawner()


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _same_process(pid: Any, start_time: Any) -> psutil.Process | None:
    """The process with this pid if it is the one that started at start_time (not a reused pid)."""
    if not isinstance(pid, int) or not isinstance(start_time, (int, float)) or pid <= 0:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - start_time) < 0.05:
            return proc
    except psutil.Error:
        pass
    return None


def write_lease(pid: int, command: list[str], runtime: str = "", *, owner: tuple[int, float] | None = None,
                start_time: float | None = None, directory: Path | None = None) -> Path:
    """Record a started runtime; `owner` (pid, start time) defaults to this process."""
    folder = directory or leases_dir()
    folder.mkdir(parents=True, exist_ok=True)
    start = start_time if start_time is not None else _start_time(pid)
    if owner is None:
        owner = (os.getpid(), _start_time(os.getpid()) or 0.0)
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = None
    lease = {"pid": pid, "start_time": start, "pgid": pgid, "runtime": runtime, "command": redact_args(command),
             "owner_pid": owner[0], "owner_start_time": owner[1], "host": socket.gethostname()}
    path = folder / f"{pid}-{int((start or 0) * 1000)}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(lease))
    tmp.replace(path)
    return path


def _end_stale(lease: dict[str, Any]) -> bool:
    """Kill the runtime of a stale lease (pid + start time must match) and what is left of its group."""
    victims: list[psutil.Process] = []
    leader = _same_process(lease.get("pid"), lease.get("start_time"))
    pgid = lease.get("pgid")
    if leader is not None:
        with _suppress_psutil():
            victims += leader.children(recursive=True)
        victims.append(leader)
    if isinstance(pgid, int) and pgid > 1 and pgid == lease.get("pid") and isinstance(lease.get("start_time"), (int, float)):
        # Members of the runtime's own group started after it (e.g. workers orphaned when the
        # leader got the parent-death signal). When the leader is gone, only a leaderless group
        # is the runtime's: a group whose id has a live leader belongs to a reused pid.
        if leader is not None or not psutil.pid_exists(pgid):
            known = {v.pid for v in victims}
            for proc in psutil.process_iter():
                with _suppress_psutil():
                    if (proc.pid not in known and os.getpgid(proc.pid) == pgid
                            and proc.create_time() >= lease["start_time"] - 0.05):
                        victims.append(proc)
    victims = [v for v in victims if _running(v)]  # a zombie is already ended, awaiting its reaper
    for proc in victims:
        with _suppress_psutil():
            proc.kill()
    psutil.wait_procs(victims, timeout=5)
    return bool(victims)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _suppress_psutil:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        return kind is not None and issubclass(kind, (psutil.Error, OSError))


def reap_stale_leases(directory: Path | None = None) -> list[str]:
    """End the runtimes whose owning suite process is gone; returns what was ended, one per runtime.

    A lease whose owner still runs (another suite process) is left alone. A lease whose runtime
    pid is gone, or now belongs to another process (start time differs), is only removed.
    """
    folder = directory or leases_dir()
    if not folder.is_dir():
        return []
    host = socket.gethostname()
    ended: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            lease = json.loads(path.read_text())
            if not isinstance(lease, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as exc:
            log.debug("lease %s unreadable (%s): removed", path, exc)
            path.unlink(missing_ok=True)
            continue
        if lease.get("host", host) != host:
            continue  # a cache shared with another machine: not ours to judge
        if _same_process(lease.get("owner_pid"), lease.get("owner_start_time")) is not None:
            continue  # its suite process still runs
        killed = _end_stale(lease)
        if killed:
            ended.append(f"{lease.get('runtime') or '?'} pid {lease.get('pid')}")
        path.unlink(missing_ok=True)
    if ended:
        log.warning("ended %d stale runtime(s) left by a suite process that is gone: %s (leases in %s)",
                    len(ended), ", ".join(ended), folder)
    return ended


def _runtime_env(*layers: dict[str, str]) -> dict[str, str]:
    """The runtime's env: the suite's own minus secret-looking names (the judge key, tokens), then
    the definition's and the spec's env (which may name a secret on purpose)."""
    env = {k: v for k, v in os.environ.items() if not SECRET_ENV.search(k)}
    for layer in layers:
        env.update(layer)
    return env


def install_prefix(definition: RuntimeDefinition) -> Path:
    """The runtime's install folder: `runtimes/<name>/`, or `runtimes/<name>@<version>/` for a
    release an arm pinned (the default release, named, shares the default folder when that
    folder's install marker names it)."""
    default = runtime_prefix(definition.name)
    version = definition.pinned_version
    if version is None:
        return default
    spec = version_spec(definition)
    if spec is not None and version == spec.default and definition.local is not None:
        marker = default / definition.local.installed_marker
        if not marker.exists() or version in re.split(r"[\s:=@]+", marker.read_text()):
            return default
    return runtime_prefix(f"{definition.name}@{version}")


def install_env(definition: RuntimeDefinition) -> dict[str, str]:
    """What the install recipe is told: the release to install, where the definition has a knob."""
    spec = version_spec(definition)
    if spec is None or not spec.install_env:
        return {}
    return {spec.install_env: definition.pinned_version or spec.default}


def is_installed(definition: RuntimeDefinition) -> bool:
    if definition.local is None:
        return False
    return (install_prefix(definition) / definition.local.installed_marker).exists()


def _noting(step: progress.Step, log_path: Path, gone: Callable[[], str | None]) -> Callable[[], str | None]:
    """`gone`, which also shows the runtime log's latest line beside the start-up spinner (it is
    called once per poll of the ready endpoint)."""
    def check() -> str | None:
        step.note(progress.tail_of(log_path))
        return gone()

    return check


class LocalRuntime(RunningRuntime):
    def __init__(self, proc: subprocess.Popen, base_url: str, command: list[str], log_path: Path,
                 lease: Path | None = None):
        self.proc = proc
        self.pid = proc.pid
        self.base_url = base_url
        self.command = command
        self.log_path = log_path
        self.lease = lease
        self._stopped = False
        REGISTRY.add(self)  # stopped at exit and on a signal whatever else happens

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def _tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._stopped:
            return
        descendants = self._tree()
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._reap(descendants)

    def kill(self) -> None:
        if self._stopped:
            return
        descendants = self._tree()
        self._signal_group(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._reap(descendants)

    def _reap(self, descendants: list[psutil.Process]) -> None:
        # Children that left the process group (some runtimes start their own sessions).
        for p in descendants:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(descendants, timeout=5)
        if self.lease is not None and self.proc.poll() is not None:
            self.lease.unlink(missing_ok=True)  # a clean stop: nothing left to end later
        self._stopped = True
        REGISTRY.discard(self)


class LocalLauncher(Launcher):
    name = "local"

    def check_available(self) -> None:  # a local process group can always be started
        return None

    def prepare(self, runtime: RuntimeDefinition) -> None:
        if runtime.local is None:
            raise EnvironmentUnavailable(f"runtime {runtime.name!r} has no local install recipe "
                                         "(it runs only from its Docker image)")
        prefix = install_prefix(runtime)
        marker = prefix / runtime.local.installed_marker
        if marker.exists():
            return
        recipe = runtime.folder / runtime.local.install
        if not recipe.exists():
            raise SuiteError(f"{runtime.folder / 'runtime.toml'}: local.install: no file {recipe.name}")
        prefix.mkdir(parents=True, exist_ok=True)
        install_log = prefix / "install.log"
        with open(prefix / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another suite process may be installing it
            if marker.exists():
                return
            pinned = install_env(runtime)
            log.info("installing %s%s into %s (log: %s)", runtime.name,
                     f" {runtime.pinned_version}" if runtime.pinned_version else "", prefix, install_log)
            t0 = time.monotonic()
            what = f"install {runtime.name}" + (f" {runtime.pinned_version}" if runtime.pinned_version else "")
            with progress.step(what, detail=f"log: {install_log}") as step, install_log.open("w") as fh:
                # The full output goes to the log; the display shows its latest line.
                proc = subprocess.Popen(["bash", str(recipe), str(prefix)], stdout=fh, stderr=subprocess.STDOUT,
                                        env={**os.environ, **pinned})
                rc = step.follow(proc, install_log)
                if rc != 0 or not marker.exists():
                    line = find_error_line(install_log.read_text(errors="replace")) or f"exit status {rc}"
                    raise SuiteError(f"installing runtime {runtime.name!r} failed: {line} (log: {install_log})")
            log.info("installed %s in %.0f s", runtime.name, time.monotonic() - t0)

    def command_for(self, spec: LaunchSpec, port: int) -> list[str]:
        runtime = spec.runtime
        assert runtime.local is not None
        values = {
            "prefix": str(install_prefix(runtime)), "model_path": str(spec.model_path),
            "served_name": spec.served_name, "host": "127.0.0.1", "port": port, "seed": spec.seed,
            "context_length": spec.context_length,
        }
        loras = [(a.name, str(a.path)) for a in spec.lora]
        return render(runtime.local.command, values, runtime.capabilities.lora_args, loras) + list(spec.args)

    def start(self, spec: LaunchSpec) -> LocalRuntime:
        runtime = spec.runtime
        if runtime.local is None:
            raise EnvironmentUnavailable(f"runtime {runtime.name!r} has no local command")
        if not is_installed(runtime):
            if runtime.pinned_version:
                raise EnvironmentUnavailable(f"runtime {runtime.name!r} {runtime.pinned_version} is not installed "
                                             f"in {install_prefix(runtime)}; the bench installs it before the arm runs")
            raise EnvironmentUnavailable(f"runtime {runtime.name!r} is not installed; "
                                         f"run `suite setup --runtime {runtime.name}`")
        reap_stale_leases()
        port = spec.port or free_port()
        command = self.command_for(spec, port)
        env = _runtime_env(runtime.local.env, spec.env)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_fh = spec.log_path.open("wb")
        t0 = time.monotonic()
        try:
            proc = _SPAWNER.popen(command, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=env, start_new_session=True)
        except OSError as exc:
            raise RuntimeStartError(f"runtime {runtime.name!r} could not start: {exc}") from None
        finally:
            log_fh.close()
        try:
            lease = write_lease(proc.pid, command, runtime.name)
        except OSError as exc:  # the cache is read-only: the parent-death signal still applies
            log.debug("no lease for %s: %s", runtime.name, exc)
            lease = None
        rt = LocalRuntime(proc, f"http://127.0.0.1:{port}", command, spec.log_path, lease)
        try:
            self._wait_ready(rt, spec, t0)
        except RuntimeStartError as exc:
            exc.returncode = rt.exit_code()
            rt.kill()
            raise
        except BaseException:
            rt.kill()
            raise
        rt.startup_s = time.monotonic() - t0
        log.info("%s ready on %s in %.1f s", runtime.name, rt.base_url, rt.startup_s)
        return rt

    def _wait_ready(self, rt: LocalRuntime, spec: LaunchSpec, t0: float) -> None:
        def gone() -> str | None:
            return None if rt.alive() else rt.ended()

        with progress.step(f"start {spec.runtime.name}", timeout_s=spec.startup_timeout_s,
                           detail=f"log: {spec.log_path}") as step:
            wait_until_ready(rt.base_url, spec, t0, _noting(step, spec.log_path, gone))

    # -- what the signature records ---------------------------------------------------------------
    def version(self, runtime: RuntimeDefinition, rt: RunningRuntime) -> str | None:
        """The installed release's own version command (in its install folder), else its server's report."""
        local = runtime.local
        if local and local.version_command:
            prefix = install_prefix(runtime)
            version = command_version([p.format(prefix=prefix) for p in local.version_command])
            if version:
                return version
        return super().version(runtime, rt)

    def env(self, runtime: RuntimeDefinition, spec: LaunchSpec) -> dict[str, str]:
        return {**(runtime.local.env if runtime.local else {}), **spec.env}

    def stack(self, runtime: RuntimeDefinition, env: dict[str, str]) -> RuntimeStack | None:
        """torch / Triton / CUDA as a Python runtime's own interpreter (in its install folder) reports them."""
        if runtime.local is None:
            return None
        prefix = install_prefix(runtime)
        for template in runtime.local.command[:1] + (runtime.local.version_command or [])[:1]:
            try:
                python = Path(template.format(prefix=prefix))
            except (KeyError, IndexError, ValueError):
                continue
            if python.name.startswith("python"):
                return probe_runtime_stack(python, env=dict(env))
        return None
