"""Faults around processes the suite did not start, or started long ago: leases, orphans, owners gone, reused pids.

Every test here injects one fault with real processes (bystanders the test starts, a suite
process killed with -9, a crafted lease, a reused pid) and reports what it cost through
`fault_report`, measured: a bystander killed counts as a foreign kill, a traceback as a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from suite import procid
from suite.launchers import local
from suite.launchers.local import reap_stale_leases, write_lease

ROOT = Path(__file__).resolve().parents[2]


def bystander(*argv: str) -> subprocess.Popen:
    """A process the suite did not start (its own session, like any other user program)."""
    proc = subprocess.Popen(list(argv) or ["bash", "-c", "sleep 1000; exit 0"], start_new_session=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until bash runs (its command line is bash's, not python's)
        try:
            if psutil.Process(proc.pid).cmdline()[:1] == (list(argv) or ["bash"])[:1]:
                break
        except psutil.Error:
            pass
        time.sleep(0.02)
    return proc


def end(proc: subprocess.Popen) -> None:
    """Stop a process this test started and everything of its own process group (a bystander's
    `sleep` child too), unless it was reaped already (its group id may then be someone else's)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def dead_owner() -> tuple[int, int]:
    proc = subprocess.Popen(["true"])
    ticks = procid.start_ticks(proc.pid) or 1
    proc.wait()
    return proc.pid, ticks


def wait_dead(proc: subprocess.Popen, timeout_s: float = 5.0) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


# ---------------------------------------------------------------- leases are proven


def _lease_for(proc: subprocess.Popen, folder: Path, command: list[str] | None = None, **edit) -> Path:
    path = write_lease(proc.pid, command or psutil.Process(proc.pid).cmdline(), "fake", owner=dead_owner(),
                       directory=folder)
    if edit:
        data = json.loads(path.read_text())
        for k, v in edit.items():
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        path.write_text(json.dumps(data))
    return path


CRAFTED = {
    "command differs": dict(command=["llama-server", "-m", "model.gguf"]),
    "no host": dict(host=None),
    "no boot id": dict(boot_id=None),
    "another boot": dict(boot_id="00000000-0000-0000-0000-000000000000"),
    "another pid namespace": dict(pidns="pid:[1]"),
    "writable by others": dict(mode=0o666),
    "owned by another user": dict(uid=65534),
    "folder writable by others": dict(folder_mode=0o777),
}


@pytest.mark.fault
@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_lease_never_kills_a_bystander(tmp_path: Path, case: str, fault_report) -> None:
    """A lease naming a live bash (pid and start read from /proc, as anyone can) ends nothing."""
    folder = tmp_path / "leases"
    spec = dict(CRAFTED[case])
    victim = bystander()
    child = psutil.Process(victim.pid).children()
    try:
        mode, uid, folder_mode = spec.pop("mode", None), spec.pop("uid", None), spec.pop("folder_mode", None)
        command = spec.pop("command", None)
        path = _lease_for(victim, folder, command, **spec)
        if mode is not None:
            path.chmod(mode)
        if uid is not None:
            if os.geteuid() != 0:
                pytest.skip("changing a file's owner needs root")
            os.chown(path, uid, uid)
        if folder_mode is not None:
            folder.chmod(folder_mode)
        ended = reap_stale_leases(folder)
        time.sleep(0.2)
        kills = int(not alive(victim)) + sum(1 for c in child if not c.is_running())
        fault_report(foreign_kills=kills)
        assert ended == [] and alive(victim), f"{case}: an unrelated bash was killed"
    finally:
        end(victim)


@pytest.mark.fault
def test_a_true_lease_still_ends_its_runtime_and_files_are_private(tmp_path: Path, fault_report) -> None:
    """The positive control: the same lease, unedited, ends the process it names (and only it)."""
    folder = tmp_path / "leases"
    runtime = bystander("bash", "-c", "sleep 1000; exit 0")
    other = bystander("bash", "-c", "sleep 1001; exit 0")
    try:
        path = _lease_for(runtime, folder)
        assert folder.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o777 == 0o600
        lease = json.loads(path.read_text())
        assert {"host", "boot_id", "pidns", "start_ticks", "owner_start_ticks"} <= set(lease)
        assert reap_stale_leases(folder) == [f"fake pid {runtime.pid}"]
        assert wait_dead(runtime)
        fault_report(foreign_kills=int(not alive(other)))
        assert alive(other) and list(folder.glob("*.json")) == []
    finally:
        for p in (runtime, other):
            end(p)


def test_a_lease_of_a_script_runtime_matches_its_interpreted_command_line(tmp_path: Path) -> None:
    """A runtime started as a `#!` script runs as `interpreter script args`: still its lease's."""
    script = tmp_path / "bin" / "fake-server"
    script.parent.mkdir()
    script.write_text("#!/bin/bash\nsleep 1000\nexit 0\n")
    script.chmod(0o755)
    command = ["fake-server", "--port", "1234"]
    proc = local._SPAWNER.popen(command, stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PATH": f"{script.parent}:{os.environ['PATH']}"})
    try:
        deadline = time.monotonic() + 5
        while ("--port" not in psutil.Process(proc.pid).cmdline() or not psutil.Process(proc.pid).children()) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert psutil.Process(proc.pid).cmdline() != command  # the kernel put bash first
        (child,) = psutil.Process(proc.pid).children()
        write_lease(proc.pid, command, "fake", owner=dead_owner(), directory=tmp_path / "leases")
        assert reap_stale_leases(tmp_path / "leases") == [f"fake pid {proc.pid}"]
        assert wait_dead(proc) and not child.is_running()
        assert not local._same_command(["bash", "/x/other-server", "--port", "1234"], command)
        assert not local._same_command(["bash", "/x/fake-server", "--port", "9"], command)
    finally:
        end(proc)


@pytest.mark.fault
def test_an_existing_open_leases_folder_is_closed_to_others(tmp_path: Path, fault_report) -> None:
    """A leases folder left 0755 by an older suite is made 0700 by the next lease."""
    folder = tmp_path / "leases"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    victim = bystander()
    try:
        _lease_for(victim, folder, command=["not-this"])
        assert folder.stat().st_mode & 0o777 == 0o700
        reap_stale_leases(folder)
        fault_report(foreign_kills=int(not alive(victim)))
        assert alive(victim)
    finally:
        end(victim)


# ---------------------------------------------------------------- no preexec_fn


def test_runtimes_start_through_an_exec_shim_not_preexec_fn(monkeypatch: pytest.MonkeyPatch) -> None:
    if local._prctl is None:
        pytest.skip("no prctl here: runtimes start without a parent-death signal")
    seen: list[dict] = []
    real = subprocess.Popen

    def spy(command, **kwargs):
        seen.append({"command": list(command), **kwargs})
        return real(command, **kwargs)

    monkeypatch.setattr(local.subprocess, "Popen", spy)
    proc = local._SPAWNER.popen(["sleep", "30"], stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert seen and "preexec_fn" not in seen[0], "Python code runs between fork and exec"
        deadline = time.monotonic() + 5
        while psutil.Process(proc.pid).cmdline() != ["sleep", "30"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert psutil.Process(proc.pid).cmdline() == ["sleep", "30"], "the shim execs the runtime under its pid"
        with pytest.raises(FileNotFoundError):
            local._SPAWNER.popen(["no-such-program-here"], stdin=subprocess.DEVNULL)
    finally:
        proc.kill()
        proc.wait()


SPAWN_AND_WAIT = textwrap.dedent("""
    import subprocess, sys, threading, time
    from suite.launchers.local import _SPAWNER
    where = sys.argv[1]
    def start():
        p = _SPAWNER.popen(["sleep", "1000"], stdin=subprocess.DEVNULL, start_new_session=True)
        print(p.pid, flush=True)
    if where == "thread":
        t = threading.Thread(target=start); t.start(); t.join()
    else:
        start()
    time.sleep(1000)
""")


@pytest.mark.fault
@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_runtime_dies_with_its_suite_through_the_shim(where: str, fault_report) -> None:
    if local._prctl is None:
        pytest.skip("no prctl here: runtimes start without a parent-death signal")
    other = bystander("bash", "-c", "sleep 1002; exit 0")
    suite_proc = subprocess.Popen([sys.executable, "-c", SPAWN_AND_WAIT, where], cwd=ROOT, stdout=subprocess.PIPE,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True)
    try:
        pid = int(suite_proc.stdout.readline())
        ticks = procid.start_ticks(pid)
        assert ticks is not None
        suite_proc.kill()  # kill -9: no cleanup runs in the suite
        suite_proc.wait()
        deadline = time.monotonic() + 5
        while procid.is_same(pid, ticks) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        survived = procid.is_same(pid, ticks) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        fault_report(foreign_kills=int(not alive(other)))
        assert not survived, "the runtime outlived its suite process"
        assert alive(other)
    finally:
        suite_proc.kill()
        end(other)


# ---------------------------------------------------------------- owner gone, judged safely


@pytest.mark.fault
def test_a_clock_step_does_not_orphan_a_live_suites_container(fault_report) -> None:
    """After an NTP step the wall-clock start read now differs from the label by seconds: the
    owner still runs, so its container stays."""
    from suite.launchers import docker as docker_launcher

    labels = docker_launcher._owner_labels()
    stepped = float(labels[docker_launcher.LABEL_OWNER_START]) + 2.0  # the clock was stepped back 2 s since
    labels[docker_launcher.LABEL_OWNER_START] = f"{stepped:.2f}"
    removed = docker_launcher.owner_gone(labels)
    fault_report(foreign_kills=int(removed))
    assert not removed, "a live suite's container would be removed after a clock step"


@pytest.mark.fault
def test_a_suite_in_another_pid_namespace_is_never_judged(fault_report) -> None:
    """Two suites with one host name and one Docker socket (CI runners): pids of the other
    namespace mean nothing here, so its containers stay even when that pid is free here."""
    from suite.launchers import docker as docker_launcher

    pid, ticks = dead_owner()  # a pid that does not run here
    labels = {**docker_launcher._owner_labels(), docker_launcher.LABEL_OWNER_PID: str(pid),
              docker_launcher.LABEL_OWNER_TICKS: str(ticks)}
    assert docker_launcher.owner_gone(labels), "control: the same labels from this namespace are gone"
    foreign = {**labels, docker_launcher.LABEL_OWNER_PIDNS: "pid:[4026539999]"}
    removed = docker_launcher.owner_gone(foreign)
    other_boot = {**labels, docker_launcher.LABEL_OWNER_BOOT: "another-machine-same-hostname"}
    removed_too = docker_launcher.owner_gone(other_boot)
    fault_report(foreign_kills=int(removed) + int(removed_too))
    assert not removed and not removed_too


@pytest.mark.fault
def test_the_ray_scratch_reaper_keeps_other_nodes_live_folders(tmp_path: Path, fault_report) -> None:
    """A cache shared by nodes: another node's scratch folder (its pid is free here) is kept;
    a folder of a dead task of this node is removed; a live one of this node is kept."""
    from suite import distributed

    me = procid.identity()
    pid, ticks = dead_owner()
    root = tmp_path / "ray-scratch"
    other_node = root / distributed._scratch_name(me.model_copy(update={"host": "node-b", "pid": pid,
                                                                        "start_ticks": ticks}))
    other_boot = root / distributed._scratch_name(me.model_copy(update={"boot_id": "x" * 36, "pid": pid,
                                                                        "start_ticks": ticks}))
    dead_here = root / distributed._scratch_name(me.model_copy(update={"pid": pid, "start_ticks": ticks}))
    live_here = root / distributed._scratch_name(me)
    older = root / f"{pid}-{int(time.time() * 1000)}"  # an older suite's name: not judged
    for d in (other_node, other_boot, dead_here, live_here, older):
        (d / "m" / "a" / "run").mkdir(parents=True)
        (d / "m" / "a" / "run" / "requests.jsonl").write_text('{"kind": "gate"}\n')
    removed = distributed._reap_scratch(root)
    lost = sum(1 for d in (other_node, other_boot, live_here, older) if not d.exists())
    fault_report(records_lost=lost)
    assert removed == [dead_here] and not dead_here.exists() and lost == 0
    assert me.host.replace("/", "_") in live_here.name, "the host is in the scratch name"


# ---------------------------------------------------------------- an orphan never blocks the GPU


class FakeNvml:
    """NVML as `suite.gpu` queries it, answering that `holders` (while they run) hold GPU 0."""

    nvmlMemory_v2 = 2

    def __init__(self, holders: list[int]):
        self.holders = holders
        self.asked: list[list[int]] = []

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "Fake H200"

    def _live(self) -> list[int]:
        out = []
        for pid in self.holders:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                pass
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list:
        live = self._live()
        self.asked.append(live)
        return [type("P", (), {"pid": pid, "usedGpuMemory": 40 << 30})() for pid in live]

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None):
        return type("M", (), {"used": (40 << 30) * len(self._live()), "total": 141 << 30})()


ORPHAN_MAKER = textwrap.dedent("""
    import subprocess, sys, time
    import psutil
    from suite.launchers.local import _SPAWNER, write_lease
    command = ["bash", "-c", "sleep 1000 & wait"]
    p = _SPAWNER.popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = psutil.Process(p.pid).children()
        if kids and psutil.Process(p.pid).cmdline() == command:
            break
        time.sleep(0.02)
    write_lease(p.pid, command, "fake-gpu-runtime")
    print(p.pid, kids[0].pid, flush=True)
    time.sleep(1000)
""")


def _orphan_of_a_killed_suite(cache: Path) -> tuple[int, int]:
    """A suite process starts a runtime whose worker holds the GPU, then is killed with -9: the
    leader dies of its parent-death signal, the worker lives on (pid, start ticks)."""
    suite_proc = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "SUITE_CACHE": str(cache)})
    leader, worker = map(int, suite_proc.stdout.readline().split())
    worker_ticks = procid.start_ticks(worker)
    suite_proc.kill()
    suite_proc.wait()
    deadline = time.monotonic() + 5
    while procid.is_same(leader, procid.start_ticks(leader)) and time.monotonic() < deadline:
        try:
            if psutil.Process(leader).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.Error:
            break
        time.sleep(0.05)
    assert procid.is_same(worker, worker_ticks), "the worker must outlive the killed suite for this fault"
    return worker, worker_ticks


@pytest.fixture
def gpu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from suite import gpu

    cache = tmp_path / "cache"
    monkeypatch.setenv("SUITE_CACHE", str(cache))
    monkeypatch.setenv("SUITE_GPU_LOCK", str(tmp_path / "gpu.lock"))
    fake = FakeNvml([])
    monkeypatch.setattr(gpu, "nvml", lambda: (fake, None))
    return cache, fake


@pytest.mark.fault
def test_a_kill_9_orphan_is_ended_before_the_gpu_is_checked(gpu_machine, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, fault_report) -> None:
    """The next bench ends the orphan of a killed suite first, then finds the GPU free."""
    from suite import bench
    from suite.records import Summary

    cache, fake = gpu_machine
    other = bystander("bash", "-c", "sleep 1003; exit 0")
    worker, ticks = _orphan_of_a_killed_suite(cache)
    fake.holders[:] = [worker]  # NVML: the orphan holds the GPU
    ran: list[str] = []

    def arm(plan, out, stages, *args, **kwargs):  # the arm itself is not the point: the GPU check is
        ran.append(plan.arm_name)
        return Summary(run_id="-", model=plan.card.name, arm=plan.arm_name, runtime=plan.runtime.name,
                       launcher=plan.launcher.name, profile=plan.profile.name, started_at="x", status="skipped")

    monkeypatch.setattr(bench, "run_arm", arm)
    tracebacks = 0
    try:
        bench.run_bench("tiny", ["llamacpp"], launcher="local", profile="quick", stages=["gate"],
                        results=tmp_path / "results")
    except Exception as exc:  # noqa: BLE001 - counted: the old order refused "the GPU is not free"
        tracebacks, refusal = 1, str(exc)
    else:
        refusal = ""
    try:
        fault_report(tracebacks=tracebacks, foreign_kills=int(not alive(other)))
        assert refusal == "", refusal
        assert ran == ["llamacpp"] and fake.asked and fake.asked[-1] == []
        assert not procid.is_same(worker, ticks) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
        assert alive(other)
    finally:
        procid.signal_if_same(worker, ticks)
        end(other)


@pytest.mark.fault
def test_a_kill_9_orphan_is_ended_before_the_gpu_is_checked_on_a_ray_node(
        gpu_machine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault_report) -> None:
    """The same on the Ray path: the task ends the orphan before it takes the node's GPU."""
    import types

    from suite import bench, distributed
    from suite.records import Summary

    cache, fake = gpu_machine
    worker, ticks = _orphan_of_a_killed_suite(cache)
    fake.holders[:] = [worker]
    ran: list[str] = []

    def arm(plan, out, stages, *args, **kwargs):
        ran.append(plan.arm_name)
        return Summary(run_id="-", model=plan.card.name, arm=plan.arm_name, runtime=plan.runtime.name,
                       launcher=plan.launcher.name, profile=plan.profile.name, started_at="x", status="skipped")

    class Remote:
        def remote(self, *a, **k):
            return 1

    fake_ray = types.SimpleNamespace(get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "n1"),
                                     get=lambda ref, timeout=None: 1)
    board = types.SimpleNamespace(started=Remote(), report=Remote())
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setattr(bench, "run_arm", arm)
    request = {"arm": "llamacpp", "model": "tiny", "launcher": "local", "profile": "quick", "stages": ["gate"]}
    tracebacks = 0
    try:
        distributed.run_arm_task(request, board)
    except Exception as exc:  # noqa: BLE001 - counted
        tracebacks, refusal = 1, str(exc)
    else:
        refusal = ""
    try:
        fault_report(tracebacks=tracebacks)
        assert refusal == "", refusal
        assert ran == ["llamacpp"]
    finally:
        procid.signal_if_same(worker, ticks)


def test_a_docker_orphan_is_removed_before_the_gpu_is_checked(gpu_machine, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker: a container of a killed suite (it gets no parent-death signal) holding the GPU."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("`docker info` fails: no Docker engine here for the container variant")
    import docker

    from suite import bench
    from suite.launchers import docker as docker_launcher
    from suite.records import Summary

    client = docker.from_env(timeout=30)
    images = client.images.list()
    if not images:
        pytest.skip("the Docker engine has no image to start a container from (none can be pulled here)")
    cache, fake = gpu_machine
    pid, ticks = dead_owner()
    container = client.containers.run(images[0].id, command=["sleep", "1000"], detach=True, entrypoint=[], labels={
        docker_launcher.LABEL_RUN: "1", docker_launcher.LABEL_RUNTIME: "fake", **docker_launcher._owner_labels(),
        docker_launcher.LABEL_OWNER_PID: str(pid), docker_launcher.LABEL_OWNER_TICKS: str(ticks)})
    try:
        container.reload()
        fake.holders[:] = [int(container.attrs["State"]["Pid"])]
        monkeypatch.setattr(bench, "run_arm", lambda plan, *a, **k: Summary(
            run_id="-", model="tiny", arm=plan.arm_name, runtime="x", launcher="local", profile="quick",
            started_at="x", status="skipped"))
        bench.run_bench("tiny", ["llamacpp"], launcher="local", profile="quick", stages=["gate"],
                        results=tmp_path / "results")
        assert container.id not in {c.id for c in client.containers.list(all=True)}
    finally:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------- memwatch and reused pids


def _start_under(pid: int, argv: list[str]) -> subprocess.Popen | None:
    """A bystander started under a pid that was freed (the kernel's ns_last_pid); None where this
    cannot be arranged (no privilege, or other processes took the pid first every time)."""
    for _ in range(30):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
                fh.write(str(pid - 1))
        except OSError:
            return None
        proc = subprocess.Popen(argv, start_new_session=True)
        if proc.pid == pid:
            return proc
        end(proc)
    return None


def _short_lived_child(root_pid: int, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = [c for c in psutil.Process(root_pid).children() if "0.5" in c.cmdline()]
        if kids:
            return kids[0].pid
        time.sleep(0.01)
    raise AssertionError("the watched tree's short-lived child never appeared")


def _wait_freed(pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not psutil.pid_exists(pid)


@pytest.mark.fault
@pytest.mark.parametrize("seen_gone", [False, True], ids=["", "seen-gone"])
@pytest.mark.parametrize("kind", ["tree", "group"])
def test_memwatch_never_kills_a_pid_it_saw_long_ago_that_now_names_another_process(kind: str, seen_gone: bool,
                                                                                  fault_report) -> None:
    """A member of the watched tree ends and its pid goes to a bystander; stopping the target
    kills the tree, not the bystander. `seen-gone`: the watchdog polled the tree while the pid was
    free (psutil then marks that member gone and stops comparing start times)."""
    from memwatch.targets import ProcessGroupTarget, ProcessTreeTarget

    command = ["bash", "-c", "sleep 0.5 & sleep 1000; exit 0"]
    if kind == "tree":
        root = subprocess.Popen(command, start_new_session=True)
        time.sleep(0.05)
        target = ProcessTreeTarget(root.pid)
        root_proc = root
    else:
        target = ProcessGroupTarget(command)
        root_proc = target.proc
    try:
        child = _short_lived_child(root_proc.pid)
        assert child in target.pids(), "the child was seen"
        _wait_freed(child)
        if seen_gone:
            assert child not in target.pids(), "the watchdog's poll sees the member gone"
        victim = _start_under(child, ["bash", "-c", "sleep 1004; exit 0"])
        if victim is None:
            pytest.skip("a freed pid cannot be handed to a new process here (ns_last_pid)")
        try:
            target.stop()
            root_proc.wait(timeout=5)  # the watched tree itself was stopped
            time.sleep(0.1)
            fault_report(foreign_kills=int(not alive(victim)))
            assert alive(victim), "memwatch killed the process that got a pid of its old tree"
        finally:
            end(victim)
    finally:
        end(root_proc)


# ---------------------------------------------------------------- a signal ends the host process


@pytest.mark.fault
def test_sigterm_ends_a_test_run_whose_test_installed_the_suites_handlers(tmp_path: Path, fault_report) -> None:
    """SIGTERM to a pytest process in which a launcher installed the suite's signal handlers: what
    the suite owned is stopped, then the run ends by SIGTERM (no test runs after it)."""
    from tests.launchers.test_lifetime_registry import run_host_and_sigterm

    other = bystander("bash", "-c", "sleep 1005; exit 0")
    try:
        rc, _ = run_host_and_sigterm(tmp_path)
        went_on = (tmp_path / "second").exists()
        fault_report(tracebacks=int(went_on), foreign_kills=int(not alive(other)))
        assert rc == -15 and not went_on and (tmp_path / "stopped").exists()
        assert alive(other)
    finally:
        end(other)


# ---------------------------------------------------------------- an install recipe dies with the suite


@pytest.mark.fault
@pytest.mark.parametrize("sig", [9, 15], ids=["SIGKILL", "SIGTERM"])
def test_an_install_recipe_killed_with_its_suite_leaves_nothing_running(tmp_path: Path, sig: int,
                                                                        fault_report) -> None:
    """`suite setup` killed while its recipe compiles and smoke-tests: the compile, the smoke test
    and its server end with it; a bystander lives."""
    from tests.launchers.test_install_lifetime import kill_suite_during_install

    other = bystander("bash", "-c", "sleep 1006; exit 0")
    try:
        left = kill_suite_during_install(tmp_path, sig)
        fault_report(foreign_kills=int(not alive(other)))
        assert left == [], f"left running: {left}"
        assert alive(other)
    finally:
        end(other)


# ---------------------------------------------------------------- a lease's pid taken by a daemon


@pytest.mark.fault
def test_a_stale_lease_whose_pid_a_daemon_took_spares_the_daemons_child(tmp_path: Path, fault_report) -> None:
    """The lease's pid was taken by another program that led its own group, left a child in it and
    exited (a double-forking daemon): the group id is the lease's, the child is not the runtime's."""
    daemon = subprocess.Popen(["bash", "-c", "sleep 4341 & echo $!; exit 0"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child_pid = int(daemon.stdout.readline())
    child = psutil.Process(child_pid)
    daemon.wait()  # the daemon exited and was reaped: its pid is free, its group lives on in its child
    assert os.getpgid(child_pid) == daemon.pid and not psutil.pid_exists(daemon.pid)
    owner = dead_owner()
    # The lease of a runtime that had this pid before the daemon (an earlier start), with its mark.
    data = {"pid": daemon.pid, "start_ticks": 1, "pgid": daemon.pid, "mark": "1-1-0123456789abcdef",
            "runtime": "fake", "command": ["fake-server"], "owner_pid": owner[0], "owner_start_ticks": owner[1],
            "host": __import__("socket").gethostname(), "boot_id": procid.boot_id(), "pidns": procid.pid_namespace()}
    folder = tmp_path / "leases"
    folder.mkdir(mode=0o700)
    (folder / f"{daemon.pid}-1.json").write_text(json.dumps(data))
    (folder / f"{daemon.pid}-1.json").chmod(0o600)
    try:
        ended = reap_stale_leases(folder)
        time.sleep(0.2)
        killed = int(not child.is_running() or child.status() == psutil.STATUS_ZOMBIE)
        fault_report(foreign_kills=killed)
        assert not killed and ended == [], "the daemon's child was killed for a lease it has nothing to do with"
        assert list(folder.glob("*.json")) == []
    finally:
        if child.is_running():
            child.kill()


# ---------------------------------------------------------------- a worker in its own session


SESSION_WORKER_MAKER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from suite.launchers.guard import start_guard
    from suite.launchers.local import _SPAWNER, write_lease
    out, guarded = Path(sys.argv[1]), sys.argv[2] == "guard"
    # A runtime whose worker starts its own session and is left to init (setsid, then its parent exits).
    command = ["bash", "-c", f"setsid bash -c 'sleep 4351 & echo $! > {out}' & wait; sleep 1000"]
    p = _SPAWNER.popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    write_lease(p.pid, command, "fake-session-runtime")
    if guarded:
        mark = getattr(p, "suite_mark", None)
        start_guard(p.pid, _SPAWNER.popen, **({"mark": mark} if mark else {}))
    deadline = time.monotonic() + 10
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    print(p.pid, out.read_text().strip(), flush=True)
    time.sleep(1000)
""")


def _session_worker_of_a_killed_suite(tmp_path: Path, guarded: bool) -> tuple[int, int, int]:
    """A suite process starts a runtime whose worker left its session; the suite is killed with -9.
    (leader pid, worker pid, worker start ticks)."""
    cache = tmp_path / "cache"
    suite_proc = subprocess.Popen([sys.executable, "-c", SESSION_WORKER_MAKER, str(tmp_path / "worker.pid"),
                                   "guard" if guarded else "lease"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "SUITE_CACHE": str(cache)})
    leader, worker = map(int, suite_proc.stdout.readline().split())
    worker_ticks = procid.start_ticks(worker)
    assert worker_ticks is not None and os.getsid(worker) != os.getsid(leader), "the worker left the session"
    suite_proc.kill()
    suite_proc.wait()
    return leader, worker, worker_ticks


def _ended(pid: int, ticks: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not procid.is_same(pid, ticks):
            return True
        with _suppress():
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        time.sleep(0.05)
    return False


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        return kind is not None and issubclass(kind, psutil.Error)


@pytest.mark.fault
@pytest.mark.parametrize("guarded", [True, False], ids=["guard", "next-start"])
def test_a_worker_in_its_own_session_ends_with_a_killed_suite(tmp_path: Path, guarded: bool, fault_report) -> None:
    """kill -9 of the suite: the guard ends the worker that started its own session (`guard`);
    without a guard, the next start's lease reaper does (`next-start`). A bystander in its own
    session, like the worker but not started by the suite, lives."""
    other = bystander("bash", "-c", "sleep 1008; exit 0")
    worker, ticks = 0, 0
    try:
        leader, worker, ticks = _session_worker_of_a_killed_suite(tmp_path, guarded)
        if not guarded:
            time.sleep(0.5)
            assert procid.is_same(worker, ticks), "without a guard the worker outlives the suite until the next start"
            ended = reap_stale_leases(tmp_path / "cache" / "leases")
            assert ended == [f"fake-session-runtime pid {leader}"], ended
        gone = _ended(worker, ticks)
        fault_report(foreign_kills=int(not alive(other)))
        assert gone, "the worker that started its own session outlived the suite"
        assert alive(other)
    finally:
        if worker:
            procid.signal_if_same(worker, ticks)
        end(other)


def test_a_stopped_runtime_takes_its_own_session_worker_with_it(tmp_path: Path) -> None:
    """A clean stop (the runtime's kill) ends the worker that left the group, found by its mark."""
    out = tmp_path / "worker.pid"
    command = ["bash", "-c", f"setsid bash -c 'sleep 4352 & echo $! > {out}' & wait; sleep 1000"]
    proc = local._SPAWNER.popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    worker = int(out.read_text())
    ticks = procid.start_ticks(worker)
    assert ticks is not None
    rt = local.LocalRuntime(proc, "http://127.0.0.1:1", command, tmp_path / "rt.log")
    try:
        rt.kill()
        assert _ended(worker, ticks), "the worker that left the group outlived its runtime"
    finally:
        procid.signal_if_same(worker, ticks)
        end(proc)


ROSTER_MAKER = textwrap.dedent("""
    import subprocess, sys, time
    import psutil
    from suite.launchers.guard import start_guard
    from suite.launchers.local import _SPAWNER, roster_of, write_lease
    # A runtime whose worker drops its environment (as a process title written over it would): no mark.
    command = ["bash", "-c", "env -i /bin/sleep 4361 & wait"]
    p = _SPAWNER.popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
    lease = write_lease(p.pid, command, "fake-unmarked-runtime", mark=p.suite_mark)
    guard = start_guard(p.pid, _SPAWNER.popen, p.suite_mark, roster_of(lease))
    deadline = time.monotonic() + 10
    while not roster_of(lease).exists() or len(roster_of(lease).read_text().split()) < 4:
        assert time.monotonic() < deadline, "no roster"
        time.sleep(0.05)
    worker = next(c for c in psutil.Process(p.pid).children() if c.cmdline()[:1] == ["/bin/sleep"])
    print(p.pid, worker.pid, guard.proc.pid, flush=True)
    time.sleep(1000)
""")


@pytest.mark.fault
def test_a_worker_without_its_mark_is_ended_from_the_guards_roster(tmp_path: Path, fault_report) -> None:
    """The guard is killed (the OOM killer), then the suite (-9): the leader dies of its parent-death
    signal, its worker (which dropped its environment, and the mark) lives on in the group. The
    next start ends it from the roster the guard kept; a bystander lives."""
    other = bystander("bash", "-c", "sleep 1009; exit 0")
    cache = tmp_path / "cache"
    suite_proc = subprocess.Popen([sys.executable, "-c", ROSTER_MAKER], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "SUITE_CACHE": str(cache)})
    worker, ticks = 0, 0
    try:
        leader, worker, guard = map(int, suite_proc.stdout.readline().split())
        ticks = procid.start_ticks(worker) or 0
        os.kill(guard, 9)  # the guard is a child of the suite process this test started
        time.sleep(0.2)
        suite_proc.kill()
        suite_proc.wait()
        time.sleep(0.5)
        assert procid.is_same(worker, ticks), "the worker must outlive its suite and guard for this fault"
        ended = reap_stale_leases(cache / "leases")
        gone = _ended(worker, ticks)
        fault_report(foreign_kills=int(not alive(other)))
        assert ended == [f"fake-unmarked-runtime pid {leader}"] and gone, (ended, gone)
        assert alive(other) and list((cache / "leases").glob("*")) == []
    finally:
        suite_proc.kill()
        if worker:
            procid.signal_if_same(worker, ticks)
        end(other)
