"""The local launcher: a runtime as a child process group, installed under the cache folder.

`prepare` runs the definition's install recipe (`images/<name>/install.sh PREFIX`) once, into
`$SUITE_CACHE/runtimes/<name>/`, never into the suite's own environment, and reuses it afterwards.
The recipe is started as a runtime is (`OwnedGroup`: the spawner with its parent-death signal, its
own session, a guard, a lease, the registry): whatever it started (a compile, a smoke test and its
server) ends when the install ends, on a signal, and when the suite is killed.
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
the runtime is started through a small exec shim (`_pdeathsig.py`, no `preexec_fn`: Python run
between fork and exec may deadlock while threads hold locks) that sets the parent-death signal
to SIGKILL (prctl PR_SET_PDEATHSIG) and then execs the runtime under the same pid. That signal
fires when the *thread* that forked the child ends, so runtimes started from another thread than
the main one are forked by one long-lived spawner thread. Each start also leaves a lease,
`$SUITE_CACHE/leases/<pid>-<ticks>.json` (mode 0600, in a folder of mode 0700): the runtime's
pid, start (clock ticks since boot, `suite.procid`), process group and command line, the owning
suite process's pid and start, and the host, boot id and pid namespace they are valid in; it is
removed on a clean stop. The next start ends the runtimes of leases whose owner is gone. A lease
is trusted only as far as it can be proven: a file of another user, or one that others may
write, is ignored; a lease of another host, boot or pid namespace is not judged; a process is
ended only when its pid, start and command line all match the lease (never by name), and the
suite says so in one log line. The processes a runtime starts itself (vLLM's engine core and
its workers) do not get that signal: a guard process beside each runtime (suite.launchers.guard)
ends the runtime's whole process group as soon as the suite is gone. Every process spawned here
carries a mark in its environment (suite.launchers.owned) that its own children inherit; the
lease records it, and what is left of a runtime once its leader is gone (a worker in its own
session included) is found by that mark, and by the roster the guard keeps beside the lease
(each member of the group by pid and start tick, as seen while the leader ran: a worker whose
environment was overwritten is in it), never by a process group id alone, which a pid reused by
another program may name.

A Python runtime's interpreter (`{python}`: its own venv, one built from a wheelhouse, or an
existing environment with its import path) is chosen by suite.launchers.pyenv; an existing
environment is checked, not installed.
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
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from suite import procid, progress
from suite.definitions import OVERRIDE_ENV, RuntimeDefinition, render, version_spec
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers import owned, pyenv
from suite.launchers.base import Launcher, LaunchSpec, ModelPath, RunningRuntime, find_error_line, free_port, wait_until_ready
from suite.launchers.guard import Guard, start_guard
from suite.lifetime import REGISTRY
from suite.paths import leases_dir, open_lock, runtime_prefix
from suite.probes import RuntimeStack, command_version, probe_runtime_stack
from suite.secrets import SECRET_ENV, redact_args

log = logging.getLogger(__name__)



# ---------------------------------------------------------------- dying with the suite

_SHIM = Path(__file__).with_name("_pdeathsig.py")
try:
    _prctl: Any = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):  # no libc prctl: leases still end stale runtimes
    _prctl = None


def _with_parent_death(command: list[str], env: dict[str, str] | None, signum: int = signal.SIGKILL) -> list[str]:
    """The command behind the exec shim that sets the parent-death signal (Linux), else as it is.

    No `preexec_fn`: Python code between fork and exec can deadlock while other threads hold
    locks (the documented hazard; the suite runs HTTP, watchdog and progress threads). The shim
    is a fresh interpreter (`-I -S`: no site, no PYTHON* variables) that calls prctl, checks
    that its parent still runs, and execs the runtime under the same pid. A program that is not
    found is refused here, as Popen refused it before.
    """
    if _prctl is None:
        return command
    path = (env or os.environ).get("PATH", os.defpath)
    if shutil.which(command[0], path=path) is None:
        raise FileNotFoundError(2, "No such file or directory", command[0])
    who = str(os.getpid()) if signum == signal.SIGKILL else f"{os.getpid()}:{int(signum)}"
    return [sys.executable, "-I", "-S", str(_SHIM), who, *command]


class _Spawner:
    """Forks runtimes from the main thread, or else from one long-lived daemon thread.

    PR_SET_PDEATHSIG fires when the thread that forked the child exits, not the process: a
    runtime forked from a short-lived worker thread would be killed when that thread ends.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[list[str], dict[str, Any], concurrent.futures.Future]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, command: list[str], *, mark: str | None = None, death_signal: int = signal.SIGKILL,
              **kwargs: Any) -> subprocess.Popen:
        """Start `command` with the parent-death signal (`death_signal`, blocked across exec where
        it is not SIGKILL) and `SUITE_OWNED_BY=<mark>` in its environment (a new mark unless given;
        suite.launchers.owned): `proc.suite_mark`."""
        mark = mark or owned.new_mark()
        env = dict(kwargs["env"]) if kwargs.get("env") is not None else dict(os.environ)
        env[owned.MARK_ENV] = mark
        kwargs["env"] = env
        command = _with_parent_death(command, env, death_signal)
        if threading.current_thread() is threading.main_thread():
            proc = subprocess.Popen(command, **kwargs)
            # the ownership mark rides on the Popen its caller holds (read back with getattr)
            proc.suite_mark = mark  # type: ignore[attr-defined]
            return proc
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True, name="runtime-spawner")
                self._thread.start()
        job: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((command, kwargs, job))
        proc = job.result()
        proc.suite_mark = mark
        return proc

    def _serve(self) -> None:
        while True:
            command, kwargs, job = self._jobs.get()
            try:
                job.set_result(subprocess.Popen(command, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                job.set_exception(exc)


_SPAWNER = _Spawner()


# ---------------------------------------------------------------- leases

def _lease_folder(folder: Path) -> Path:
    """The leases folder, created 0700 (only this user may add a lease that ends a process)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = folder.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o077:
        folder.chmod(0o700)
    return folder


def write_lease(pid: int, command: list[str], runtime: str = "", *, owner: tuple[int, int] | None = None,
                start_ticks: int | None = None, directory: Path | None = None, mark: str | None = None) -> Path:
    """Record a started runtime; `owner` (pid, start ticks since boot) defaults to this process.

    The lease names the runtime (pid, start ticks, process group, command line, the mark in its
    environment: `mark`, else read from the process) and its owner, with the host, boot id and pid
    namespace they are valid in (`suite.procid`); the file is 0600."""
    folder = _lease_folder(directory or leases_dir())
    start = start_ticks if start_ticks is not None else procid.start_ticks(pid)
    if owner is None:
        me = procid.identity()
        owner = (os.getpid(), me.start_ticks if me else -1)
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = None
    mark = mark or owned.mark_of(pid)
    lease = {"pid": pid, "start_ticks": start, "pgid": pgid, "mark": mark, "runtime": runtime,
             "command": redact_args(command),
             "owner_pid": owner[0], "owner_start_ticks": owner[1], "host": socket.gethostname(),
             "boot_id": procid.boot_id(), "pidns": procid.pid_namespace()}
    path = folder / f"{pid}-{start or 0}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(lease))
    tmp.replace(path)
    return path


def roster_of(lease: Path) -> Path:
    """The file beside a lease where the runtime's guard keeps its group's members (pid, start tick)."""
    return lease.with_suffix(".members")


def _end_roster(path: Path, since_ticks: int) -> list[int]:
    """SIGKILL each process of a trusted roster that still is the process it names (pid and start
    tick, at or after the leader's); the pids signalled. The roster is removed."""
    sent: list[int] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return sent
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        text = fh.read(1 << 20).decode("ascii", "replace") if stat.S_ISREG(st.st_mode) and _trusted(st) else ""
    path.unlink(missing_ok=True)
    for line in text.splitlines():
        try:
            pid, ticks = (int(x) for x in line.split())
        except ValueError:
            continue
        if pid > 1 and pid != os.getpid() and ticks >= since_ticks and not _zombie(pid) \
                and procid.signal_if_same(pid, ticks):
            sent.append(pid)
    return sent


def _zombie(pid: int) -> bool:
    """Whether `pid` has ended and awaits its reaper (nothing left to end)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _command_of(proc: psutil.Process) -> list[str] | None:
    try:
        return redact_args(proc.cmdline())
    except psutil.Error:
        return None


def _same_command(live: list[str] | None, leased: Any) -> bool:
    """Whether a live command line is the lease's: equal, or the lease's as the kernel runs a
    script (`#!` interpreter and its argument first, the script's path as found on PATH)."""
    if live is None or not isinstance(leased, list) or not leased:
        return False
    if live == leased:
        return True
    n = len(leased)
    if len(live) <= n:
        return False
    script = live[len(live) - n]
    return live[len(live) - n + 1:] == leased[1:] and os.path.basename(script) == os.path.basename(leased[0])


def _end_stale(lease: dict[str, Any]) -> bool:
    """Kill the runtime of a stale lease and what is left of it; True if anything was killed.

    The leader is ended only if its pid, start tick and command line all match the lease (a
    process that differs in any is someone else's: left alone), with its descendants and, while
    it is that process (running or a zombie), the members of its process group. What is left
    once the leader is gone is found by the lease's mark (suite.launchers.owned): the processes
    whose environment carries it, in the group or out of it (a worker that started its own
    session). A group id alone proves nothing once its leader is gone: the pid may have been
    taken by another program that led its own group and left a child in it. Every signal is sent
    only to the process whose start was read (pid reuse between listing and kill is ruled out)."""
    victims: list[psutil.Process] = []
    pid, ticks, pgid, mark = lease.get("pid"), lease.get("start_ticks"), lease.get("pgid"), lease.get("mark")
    if not isinstance(pid, int) or not isinstance(ticks, int) or pid <= 1:
        return False
    mark = mark if isinstance(mark, str) and mark else None
    if mark is not None and mark == owned.mark_of(os.getpid()):
        mark = None  # this process carries it too (started under that runtime): not a mark to end by
    leader: psutil.Process | None = None
    same = procid.is_same(pid, ticks)  # the lease's process, running or a zombie not yet reaped
    if same:
        with _suppress_psutil():
            candidate = psutil.Process(pid)
            if _running(candidate):
                if not _same_command(_command_of(candidate), lease.get("command")):
                    log.warning("lease of %s pid %d not acted on: that process's command line is not the "
                                "lease's (%s)", lease.get("runtime") or "?", pid,
                                " ".join(_command_of(candidate) or [])[:200])
                    return False
                leader = candidate
    if leader is not None:
        with _suppress_psutil():
            victims += leader.children(recursive=True)
        victims.append(leader)
    # The group is the runtime's only while its leader is the lease's process (running or a zombie).
    group = pgid if isinstance(pgid, int) and pgid == pid and same else None
    ended = _kill_all(victims)
    # A member may fork between the listing and the kill: look again until a pass finds none.
    for _ in range(5):
        members = _group_members(group, ticks) if group is not None else []
        if not members:
            break
        ended += _kill_all(members)
    return bool(ended) | bool(_end_marked(mark))


def _group_members(pgid: int, since_ticks: int) -> list[psutil.Process]:
    """Live members of process group `pgid` that started at or after `since_ticks`."""
    found = []
    for proc in psutil.process_iter():
        with _suppress_psutil():
            member_ticks = procid.start_ticks(proc.pid)
            if os.getpgid(proc.pid) == pgid and member_ticks is not None and member_ticks >= since_ticks \
                    and _running(proc):
                found.append(proc)
    return found


def _kill_all(procs: list[psutil.Process]) -> list[psutil.Process]:
    """SIGKILL each process that still is the one listed (its start read now, the signal sent
    through a pidfd where there are pidfds); those signalled, once they have ended."""
    victims = []
    for proc in procs:
        ticks = procid.start_ticks(proc.pid)  # then: is the pid still the process listed (psutil's start)?
        if ticks is not None and _running(proc) and proc.is_running() and procid.signal_if_same(proc.pid, ticks):
            victims.append(proc)  # a zombie is already ended, awaiting its reaper
    psutil.wait_procs(victims, timeout=5)
    return victims


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


def _trusted(st: os.stat_result) -> bool:
    """A lease file or folder this user owns and no one else may write."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_lease(path: Path) -> dict[str, Any] | None:
    """A lease file's content if it can be trusted (a regular file of this user, writable by no one
    else); None (left alone, said in the log) otherwise. Raises ValueError for an unreadable one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        log.warning("lease %s not read (%s): left alone", path, exc.strerror or exc)
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or not _trusted(st):
            log.warning("lease %s ignored: not a file of this user that only it may write (uid %d, mode %o)",
                        path, st.st_uid, stat.S_IMODE(st.st_mode))
            return None
        data = json.loads(fh.read(1 << 16).decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return data


def reap_stale_leases(directory: Path | None = None) -> list[str]:
    """End the runtimes whose owning suite process is gone; returns what was ended, one per runtime.

    Only leases this user wrote, in a folder only it may write, are read; only those of this host,
    boot and pid namespace are judged (a cache shared with another machine or container is left
    alone). A lease whose owner still runs is left alone; one whose runtime is gone, or whose pid
    now names another process (start or command line differ), is only removed.
    """
    folder = directory or leases_dir()
    try:
        st = folder.lstat()
    except OSError:
        return []
    if not stat.S_ISDIR(st.st_mode) or not _trusted(st):
        log.warning("leases in %s ignored: not a folder of this user that only it may write (mode %o)",
                    folder, stat.S_IMODE(st.st_mode))
        return []
    ended: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            lease = _read_lease(path)
        except (OSError, ValueError, RecursionError) as exc:
            log.debug("lease %s unreadable (%s): removed", path, exc)
            path.unlink(missing_ok=True)
            continue
        if lease is None:
            continue
        if not procid.same_machine(lease.get("boot_id"), lease.get("pidns"), lease.get("host")):
            continue  # another machine, boot or container sharing the cache, or an older lease: not ours to judge
        owner, owner_ticks = lease.get("owner_pid"), lease.get("owner_start_ticks")
        if procid.is_same(owner, owner_ticks):
            continue  # its suite process still runs
        killed = _end_stale(lease)
        ticks = lease.get("start_ticks")
        if isinstance(ticks, int) and _end_roster(roster_of(path), ticks):
            killed = True  # members the guard saw (a worker whose environment, and mark, was overwritten)
        if killed:
            ended.append(f"{lease.get('runtime') or '?'} pid {lease.get('pid')}")
        path.unlink(missing_ok=True)
    if ended:
        log.warning("ended %d stale runtime(s) left by a suite process that is gone: %s (leases in %s)",
                    len(ended), ", ".join(ended), folder)
    return ended


def _python_env(runtime: RuntimeDefinition) -> dict[str, str]:
    """An existing Python environment's import path and name (suite.launchers.pyenv), else nothing."""
    way = pyenv.python_way(runtime)
    return way.env() if way is not None else {}


# Starts on another free port where the runtime's log says the one it was given was taken.
PORT_TRIES = 3
_PORT_TAKEN = re.compile(r"address already in use|EADDRINUSE|errno 98|couldn't bind|could not bind", re.I)


def _port_was_taken(log_path: Path) -> bool:
    """Whether a runtime that did not start says, in its log, that its port was in use."""
    try:
        return _PORT_TAKEN.search(log_path.read_text(errors="replace")[-20000:]) is not None
    except OSError:
        return False


def _with_plugins(runtime: RuntimeDefinition, env: dict[str, str]) -> dict[str, str]:
    """Where the launch asks for a kernel override (`SUITE_KERNEL_OVERRIDE`), the runtime's plugin
    folder (`[local] plugins`) first on its PYTHONPATH; a runtime that has none cannot apply one."""
    if not env.get(OVERRIDE_ENV):
        return env
    folder = runtime.local.plugins if runtime.local else None
    if folder is None:
        raise SuiteError(f"runtime {runtime.name!r} has no plugin folder ([local] plugins) for the kernel "
                         f"override {env[OVERRIDE_ENV]!r}")
    path = str((runtime.folder / folder).resolve())
    current = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": path + (os.pathsep + current if current else "")}


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


def smoke_env(definition: RuntimeDefinition, model_path: ModelPath | None) -> dict[str, str]:
    """What the install recipe smoke-tests its build on: the path of the definition's `smoke_model`
    (found by `model_path`, from the catalog above the launchers; without it, nothing)."""
    if definition.local is None or definition.local.smoke_model is None or model_path is None:
        return {}
    card, fmt = definition.local.smoke_model.split(":", 1)
    return {"SUITE_SMOKE_MODEL": str(model_path(card, fmt))}


def is_installed(definition: RuntimeDefinition) -> bool:
    if definition.local is None:
        return False
    if pyenv.uses_existing(definition):  # an existing environment: nothing to install (checked in prepare)
        return True
    if definition.local.install is None:  # nothing to install, unless `{python}` is a venv no recipe builds
        return pyenv.python_way(definition) is None
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
        self.mark: str | None = getattr(proc, "suite_mark", None)
        self.guard: Guard | None = None
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
        # Children that left the process group (some runtimes start their own sessions), and
        # whatever carries the runtime's mark (a worker that double-forked is no one's child).
        for p in descendants:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(descendants, timeout=5)
        _end_marked(self.mark)
        if self.guard is not None:
            self.guard.stop()
        if self.lease is not None and self.proc.poll() is not None:
            self.lease.unlink(missing_ok=True)  # a clean stop: nothing left to end later
            roster_of(self.lease).unlink(missing_ok=True)
        self._stopped = True
        REGISTRY.discard(self)


def _end_marked(mark: str | None, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process that carries `mark`, again until none is left (one may fork between
    a listing and the kill); the pids ended."""
    ended: list[int] = []
    if not mark:
        return ended
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sent = owned.kill_marked(mark)
        if not sent:
            break
        ended += sent
        time.sleep(0.02)
    return ended


class OwnedGroup:
    """A process the suite started for itself (an install recipe) with its own session, a guard
    and a lease, as a runtime has: its whole group, and whatever carries its mark, ends when it
    ends, when the suite stops on a signal or exits, and (guard, lease) when the suite is killed."""

    def __init__(self, command: list[str], what: str, **popen_kwargs: Any):
        self.lease: Path | None = None
        self.guard: Guard | None = None
        # A signal meanwhile is delivered once the group, its lease and its guard are all recorded.
        with REGISTRY.deferred():
            self.proc = _SPAWNER.popen(command, start_new_session=True, **popen_kwargs)
            self.mark: str | None = getattr(self.proc, "suite_mark", None)
            REGISTRY.add(self)
            try:
                self.lease = write_lease(self.proc.pid, command, what, mark=self.mark)
            except OSError as exc:  # a read-only cache: the guard and the parent-death signal still apply
                log.debug("no lease for %s: %s", what, exc)
            self.guard = start_guard(self.proc.pid, _SPAWNER.popen, self.mark,
                                     roster_of(self.lease) if self.lease else None)

    def kill(self) -> None:
        """End the group and every marked process, then the guard; the lease is removed."""
        if self.proc.returncode is None:  # not reaped: the group id is still this process's
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _end_marked(self.mark)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.guard is not None:
            self.guard.stop()
        if self.lease is not None:
            self.lease.unlink(missing_ok=True)
            roster_of(self.lease).unlink(missing_ok=True)
        REGISTRY.discard(self)


class LocalLauncher(Launcher):
    name = "local"
    runs_children = True

    def check_available(self) -> None:  # a local process group can always be started
        return None

    def prepare(self, runtime: RuntimeDefinition, model_path: ModelPath | None = None) -> None:
        if runtime.local is None:
            raise EnvironmentUnavailable(f"runtime {runtime.name!r} has no local install recipe "
                                         "(it runs only from its Docker image)")
        if pyenv.uses_existing(runtime):
            version = pyenv.check_existing(runtime)  # another version than the arm's: one line
            way = pyenv.python_way(runtime)
            log.info("%s %s from %s", runtime.name, version, way.text if way is not None else "its own Python")
            return
        if runtime.local.install is None:  # nothing to install: the command runs what the machine has
            way = pyenv.python_way(runtime)
            if way is not None:
                raise SuiteError(f"{runtime.folder / 'runtime.toml'}: local.install: none, so no recipe builds "
                                 f"the runtime's own venv for {{python}}; set {way.python_var} to an existing "
                                 "interpreter or name an install recipe")
            return
        prefix = install_prefix(runtime)
        marker = prefix / runtime.local.installed_marker
        if marker.exists():
            return
        recipe = runtime.folder / runtime.local.install
        if not recipe.exists():
            raise SuiteError(f"{runtime.folder / 'runtime.toml'}: local.install: no file {recipe.name}")
        reap_stale_leases()  # an install or runtime a killed suite left (a compile holding a build lock)
        prefix.mkdir(parents=True, exist_ok=True)
        install_log = prefix / "install.log"
        with open_lock(prefix / ".install.lock") as lock:  # never through a symbolic link
            fcntl.flock(lock, fcntl.LOCK_EX)  # another suite process may be installing it
            if marker.exists():
                return
            pinned = install_env(runtime) | smoke_env(runtime, model_path)
            log.info("installing %s%s into %s (log: %s)", runtime.name,
                     f" {runtime.pinned_version}" if runtime.pinned_version else "", prefix, install_log)
            t0 = time.monotonic()
            what = f"install {runtime.name}" + (f" {runtime.pinned_version}" if runtime.pinned_version else "")
            with progress.step(what, detail=f"log: {install_log}") as step, install_log.open("w") as fh:
                # The full output goes to the log; the display shows its latest line. The recipe runs
                # in its own session, guarded and leased like a runtime: nothing it started (a
                # compile, a smoke test's server) outlives the install, whatever ends it.
                recipe_run = OwnedGroup(["bash", str(recipe), str(prefix)], what, stdout=fh,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env={**os.environ, **pinned})
                try:
                    rc = step.follow(recipe_run.proc, install_log)
                finally:
                    recipe_run.kill()
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
            "context_length": spec.context_length, "python": pyenv.interpreter(runtime, install_prefix(runtime)),
        }
        loras = [(a.name, str(a.path)) for a in spec.lora]
        return render(runtime.local.command, values, runtime.capabilities.lora_args, loras) + list(spec.args)

    def start(self, spec: LaunchSpec) -> LocalRuntime:
        """Start the runtime on the spec's port, or on a free one. A free port is picked and then
        given to the runtime, so another process may take it in between (two arms starting at once
        on one host): where the runtime's log says its port was in use, it starts again on another
        port, twice at most."""
        for attempt in range(PORT_TRIES):
            port = spec.port or free_port()
            try:
                return self._start_on(spec, port)
            except RuntimeStartError:
                if spec.port is not None or attempt == PORT_TRIES - 1 or not _port_was_taken(spec.log_path):
                    raise
                log.warning("%s: port %d was taken before it bound it; starting again on another port",
                            spec.runtime.name, port)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _start_on(self, spec: LaunchSpec, port: int) -> LocalRuntime:
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
        command = self.command_for(spec, port)
        env = _with_plugins(runtime, _runtime_env(runtime.local.env, _python_env(runtime), spec.env))
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
            lease = write_lease(proc.pid, command, runtime.name, mark=getattr(proc, "suite_mark", None))
        except OSError as exc:  # the cache is read-only: the parent-death signal still applies
            log.debug("no lease for %s: %s", runtime.name, exc)
            lease = None
        rt = LocalRuntime(proc, f"http://127.0.0.1:{port}", command, spec.log_path, lease)
        # the group (workers too) ends with the suite; its members are kept beside the lease
        rt.guard = start_guard(proc.pid, _SPAWNER.popen, rt.mark, roster_of(lease) if lease else None)
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
            python = pyenv.interpreter(runtime, prefix)
            version = command_version([p.format(prefix=prefix, python=python) for p in local.version_command],
                                      env=_runtime_env(_python_env(runtime)))
            if version:
                return version
        return super().version(runtime, rt)

    def features(self, runtime: RuntimeDefinition, rt: RunningRuntime) -> str | None:
        """The install's own features command (the same libraries the server loaded), else the log's line."""
        local = runtime.local
        if local and local.features_command:
            prefix = install_prefix(runtime)
            line = command_version([p.format(prefix=prefix) for p in local.features_command], limit=None)
            if line:
                return line
        return super().features(runtime, rt)

    def env(self, runtime: RuntimeDefinition, spec: LaunchSpec) -> dict[str, str]:
        return _with_plugins(runtime, {**(runtime.local.env if runtime.local else {}), **_python_env(runtime),
                                       **spec.env})

    def stack(self, runtime: RuntimeDefinition, env: dict[str, str]) -> RuntimeStack | None:
        """torch / Triton / CUDA as a Python runtime's own interpreter (in its install folder) reports them."""
        if runtime.local is None:
            return None
        prefix = install_prefix(runtime)
        for template in runtime.local.command[:1] + (runtime.local.version_command or [])[:1]:
            try:
                python = Path(template.format(prefix=prefix, python=pyenv.interpreter(runtime, prefix)))
            except (KeyError, IndexError, ValueError):
                continue
            if python.name.startswith("python"):
                return probe_runtime_stack(python, env=dict(env))
        return None
