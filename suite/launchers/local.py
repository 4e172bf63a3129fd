"""The local launcher: a runtime as a child process group, installed under the cache folder.

`prepare` runs the definition's install recipe (`images/<name>/install.sh PREFIX`) once, into
`$SUITE_CACHE/runtimes/<name>/`, never into the suite's own environment, and reuses it afterwards.
`start` renders the command template, starts it in its own session (process group) with its log
in the run folder, and waits until the ready endpoint answers 200. A runtime that dies, logs a
refusal pattern, or never gets ready is stopped and reported with its log's error line. Every
started group is killed on exit, on Ctrl-C and on exceptions (context manager + atexit).
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from suite.definitions import RuntimeDefinition, render
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers.base import (LaunchSpec, Launcher, RunningRuntime, find_error_line, free_port,
                                 wait_until_ready)
from suite.paths import runtime_prefix

log = logging.getLogger(__name__)

_LIVE: set["LocalRuntime"] = set()


def _kill_all_live() -> None:
    for rt in list(_LIVE):
        rt.kill()


atexit.register(_kill_all_live)


def is_installed(definition: RuntimeDefinition) -> bool:
    if definition.local is None:
        return False
    return (runtime_prefix(definition.name) / definition.local.installed_marker).exists()


class LocalRuntime(RunningRuntime):
    def __init__(self, proc: subprocess.Popen, base_url: str, command: list[str], log_path: Path):
        self.proc = proc
        self.pid = proc.pid
        self.base_url = base_url
        self.command = command
        self.log_path = log_path
        self._stopped = False
        _LIVE.add(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

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
        self._stopped = True
        _LIVE.discard(self)


class LocalLauncher(Launcher):
    name = "local"

    def check_available(self) -> None:  # a local process group can always be started
        return None

    def prepare(self, runtime: RuntimeDefinition) -> None:
        if runtime.local is None:
            raise EnvironmentUnavailable(f"runtime {runtime.name!r} has no local install recipe "
                                         "(it runs only from its Docker image)")
        prefix = runtime_prefix(runtime.name)
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
            log.info("installing %s into %s (log: %s)", runtime.name, prefix, install_log)
            t0 = time.monotonic()
            with install_log.open("w") as fh:
                rc = subprocess.run(["bash", str(recipe), str(prefix)], stdout=fh, stderr=subprocess.STDOUT).returncode
            if rc != 0 or not marker.exists():
                line = find_error_line(install_log.read_text(errors="replace")) or f"exit status {rc}"
                raise SuiteError(f"installing runtime {runtime.name!r} failed: {line} (log: {install_log})")
            log.info("installed %s in %.0f s", runtime.name, time.monotonic() - t0)

    def command_for(self, spec: LaunchSpec, port: int) -> list[str]:
        runtime = spec.runtime
        assert runtime.local is not None
        values = {
            "prefix": str(runtime_prefix(runtime.name)), "model_path": str(spec.model_path),
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
            raise EnvironmentUnavailable(f"runtime {runtime.name!r} is not installed; "
                                         f"run `suite setup --runtime {runtime.name}`")
        port = spec.port or free_port()
        command = self.command_for(spec, port)
        env = {**os.environ, **runtime.local.env, **spec.env}
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_fh = spec.log_path.open("wb")
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(command, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        except OSError as exc:
            log_fh.close()
            raise RuntimeStartError(f"runtime {runtime.name!r} could not start: {exc}") from None
        finally:
            pass
        log_fh.close()
        rt = LocalRuntime(proc, f"http://127.0.0.1:{port}", command, spec.log_path)
        try:
            self._wait_ready(rt, spec, t0)
        except BaseException:
            rt.kill()
            raise
        rt.startup_s = time.monotonic() - t0
        log.info("%s ready on %s in %.1f s", runtime.name, rt.base_url, rt.startup_s)
        return rt

    def _wait_ready(self, rt: LocalRuntime, spec: LaunchSpec, t0: float) -> None:
        def gone() -> str | None:
            return None if rt.alive() else f"exited with status {rt.proc.returncode}"

        wait_until_ready(rt.base_url, spec, t0, gone)
