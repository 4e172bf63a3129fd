"""Runtimes die with the suite, whatever ends it.

Real llama-server on the tiny model: `suite up` in a subprocess, then kill -9 / SIGHUP / SIGQUIT
of the suite must leave no llama-server behind; a runtime started from a worker thread survives
that thread but not the suite; leases left by a dead suite are ended at the next start, checking
pid and start time (a reused pid is left alone). Docker: containers whose owner is gone.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from suite import procid
from suite.catalog import get_card, is_prepared
from suite.definitions import get_definition
from suite.launchers import docker as docker_launcher
from suite.launchers.local import is_installed, reap_stale_leases, write_lease
from suite.paths import models_dir, runtime_prefix

REPO = Path(__file__).resolve().parents[2]
SUITE = [sys.executable, "-m", "suite.cli"]


def gone(pid: int, create_time: float | None = None) -> bool:
    """The process ended (a zombie waiting for a reaper counts as ended)."""
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 0.05:
            return True
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, create_time: float | None, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid, create_time):
            return True
        time.sleep(0.1)
    return gone(pid, create_time)


def kill_if_same(pid: int, create_time: float) -> None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) < 0.05:
            proc.kill()
    except psutil.Error:
        pass


@pytest.fixture
def suite_cache(tmp_path: Path) -> Path:
    """A cache folder of its own (own leases and logs) sharing the real llama-server build and model."""
    if not is_installed(get_definition("llamacpp")):
        pytest.skip("runtime llamacpp is not installed here (run `suite setup`)")
    if not is_prepared(get_card("tiny"), "gguf"):
        pytest.skip("the tiny GGUF is not prepared here (run `suite setup`)")
    cache = tmp_path / "cache"
    (cache / "runtimes").mkdir(parents=True)
    (cache / "runtimes" / "llamacpp").symlink_to(runtime_prefix("llamacpp"))
    (cache / "models").symlink_to(models_dir())
    return cache


def start_suite(cache: Path, tmp: Path, args: list[str]) -> tuple[subprocess.Popen, psutil.Process]:
    """Start a suite process; returns it and its llama-server once that answers."""
    out = (tmp / "suite.out").open("wb")
    env = {**os.environ, "SUITE_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = (tmp / "suite.out").read_text(errors="replace")
        if proc.poll() is not None:
            pytest.fail(f"the suite ended (status {proc.returncode}) before serving:\n{text}")
        if "serving" in text or "READY" in text:
            servers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                       if "llama-server" in " ".join(c.cmdline())]
            if servers:
                return proc, servers[0]
        time.sleep(0.1)
    proc.kill()
    pytest.fail("the suite did not serve within 60 s:\n" + (tmp / "suite.out").read_text(errors="replace"))


@pytest.mark.live
def test_kill_9_of_the_suite_ends_llama_server(suite_cache: Path, tmp_path: Path):
    proc, server = start_suite(suite_cache, tmp_path, [*SUITE, "up", "llamacpp"])
    created = server.create_time()
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert wait_gone(server.pid, created), "llama-server survived kill -9 of the suite"
        # The dead suite's lease is still there; the next start removes it (nothing left to end).
        leases = list((suite_cache / "leases").glob("*.json"))
        assert [json.loads(p.read_text())["pid"] for p in leases] == [server.pid]
        assert reap_stale_leases(suite_cache / "leases") == []
        assert list((suite_cache / "leases").glob("*.json")) == []
    finally:
        proc.kill()
        kill_if_same(server.pid, created)


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
def test_hangup_or_quit_stops_llama_server(suite_cache: Path, tmp_path: Path, signum: int):
    proc, server = start_suite(suite_cache, tmp_path, [*SUITE, "up", "llamacpp"])
    created = server.create_time()
    try:
        os.kill(proc.pid, signum)
        rc = proc.wait(timeout=20)
        assert wait_gone(server.pid, created), f"llama-server survived {signal.Signals(signum).name} of the suite"
        assert rc == 130, (tmp_path / "suite.out").read_text(errors="replace")
        assert list((suite_cache / "leases").glob("*.json")) == [], "a clean stop removes its lease"
    finally:
        proc.kill()
        kill_if_same(server.pid, created)


DRIVER = textwrap.dedent("""
    import sys, threading, time
    from suite.catalog import format_path, get_card
    from suite.definitions import get_definition
    from suite.launchers.base import LaunchSpec
    from suite.launchers.local import LocalLauncher

    started = []
    def start():
        spec = LaunchSpec(runtime=get_definition("llamacpp"), model_path=format_path(get_card("tiny"), "gguf"),
                          served_name="tiny", log_path=__import__("pathlib").Path(sys.argv[1]))
        started.append(LocalLauncher().start(spec))
    worker = threading.Thread(target=start)
    worker.start()
    worker.join()  # the thread that asked for the runtime has ended
    time.sleep(1.0)
    assert started[0].alive(), "the runtime died with the thread that started it"
    print("READY", flush=True)
    time.sleep(1000)
""")


def test_runtime_started_from_a_thread_outlives_the_thread_not_the_suite(suite_cache: Path, tmp_path: Path):
    proc, server = start_suite(suite_cache, tmp_path,
                               [sys.executable, "-c", DRIVER, str(tmp_path / "runtime.log")])
    created = server.create_time()
    try:
        assert not gone(server.pid, created)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert wait_gone(server.pid, created), "llama-server survived kill -9 of its suite process"
    finally:
        proc.kill()
        kill_if_same(server.pid, created)


# ---------------------------------------------------------------- leases


def sleeper(*argv: str) -> tuple[subprocess.Popen, float]:
    proc = subprocess.Popen(list(argv) or ["sleep", "1000"], start_new_session=True)
    return proc, psutil.Process(proc.pid).create_time()


def dead_owner() -> tuple[int, int]:
    """(pid, start ticks) of a suite process that is gone."""
    proc = subprocess.Popen(["true"])
    ticks = procid.start_ticks(proc.pid) or 1
    proc.wait()
    return proc.pid, ticks


def test_next_start_ends_only_the_runtime_of_a_dead_lease(suite_cache: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture):
    """A real start (llama-server) ends the stale runtime, spares a reused pid and a live owner's."""
    from tests.conftest import start_local

    leases = suite_cache / "leases"
    owner = dead_owner()
    stale, stale_t = sleeper()
    reused, reused_t = sleeper()
    kept, kept_t = sleeper()
    try:
        write_lease(stale.pid, ["sleep", "1000"], "fake", owner=owner, directory=leases)
        # The same pid, but a process that started later than the one the lease names: a reused pid.
        write_lease(reused.pid, ["sleep", "1000"], "fake", owner=owner,
                    start_ticks=procid.start_ticks(reused.pid) - 10_000, directory=leases)
        kept_lease = write_lease(kept.pid, ["sleep", "1000"], "fake", directory=leases)  # owner: this process
        monkeypatch.setenv("SUITE_CACHE", str(suite_cache))
        with caplog.at_level(logging.WARNING, logger="suite.launchers.local"):
            rt = start_local("llamacpp", _tiny_gguf(), tmp_path)
        with rt:
            assert wait_gone(stale.pid, stale_t), "the stale runtime was not ended"
            assert reused.poll() is None, "a reused pid (other start time) was killed"
            assert kept.poll() is None, "a runtime of a live suite process was killed"
            lines = [r.getMessage() for r in caplog.records if "stale runtime" in r.getMessage()]
            assert len(lines) == 1 and f"fake pid {stale.pid}" in lines[0] and str(reused.pid) not in lines[0]
            remaining = sorted(p.name for p in leases.glob("*.json"))
            own = [p.name for p in leases.glob(f"{rt.pid}-*.json")]
            assert len(own) == 1, "a started runtime leaves a lease"
            assert remaining == sorted([kept_lease.name, own[0]])
        assert sorted(p.name for p in leases.glob("*.json")) == [kept_lease.name], "stop removes the lease"
    finally:
        for p in (stale, reused, kept):
            p.kill()
            p.wait()


def _tiny_gguf() -> Path:
    from suite.catalog import format_path

    return format_path(get_card("tiny"), "gguf")


def test_stale_lease_ends_the_orphans_of_its_group(tmp_path: Path):
    """The leader got the parent-death signal; a worker of its group lives on: it is ended too
    (started as the launcher starts a runtime, so it carries the runtime's mark)."""
    from suite.launchers.local import _SPAWNER

    leases = tmp_path / "leases"
    group = _SPAWNER.popen(["sh", "-c", "sleep 1000 & wait"], stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 5
    while not psutil.Process(group.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = psutil.Process(group.pid).children()[0]
    worker_t = worker.create_time()
    write_lease(group.pid, ["sh", "-c", "sleep 1000 & wait"], "fake", owner=dead_owner(), directory=leases)
    group.kill()
    group.wait()
    try:
        assert not gone(worker.pid, worker_t)
        assert reap_stale_leases(leases) == [f"fake pid {group.pid}"]
        assert wait_gone(worker.pid, worker_t)
        assert list(leases.glob("*.json")) == []
    finally:
        kill_if_same(worker.pid, worker_t)


def test_unreadable_lease_is_removed(tmp_path: Path):
    leases = tmp_path / "leases"
    leases.mkdir()
    (leases / "1-1.json").write_text("{not json")
    (leases / "2-2.json").write_text("[1, 2]")
    assert reap_stale_leases(leases) == []
    assert list(leases.iterdir()) == []


# ---------------------------------------------------------------- Docker


def test_container_owner_labels_decide_what_is_orphaned():
    labels = docker_launcher._owner_labels()
    assert not docker_launcher.owner_gone(labels)  # this process: alive
    pid, ticks = dead_owner()
    dead = {**labels, docker_launcher.LABEL_OWNER_PID: str(pid), docker_launcher.LABEL_OWNER_TICKS: str(ticks)}
    assert docker_launcher.owner_gone(dead)
    # A live pid with another start tick is a reused pid: its owner is gone.
    me_ticks = int(labels[docker_launcher.LABEL_OWNER_TICKS])
    assert docker_launcher.owner_gone({**labels, docker_launcher.LABEL_OWNER_TICKS: str(me_ticks - 10_000)})
    assert not docker_launcher.owner_gone({**dead, docker_launcher.LABEL_OWNER_HOST: socket.gethostname() + "-other"})
    assert not docker_launcher.owner_gone({})  # containers of older suites carry no owner
    assert not docker_launcher.owner_gone({k: v for k, v in dead.items() if k != docker_launcher.LABEL_OWNER_BOOT})


def test_docker_containers_of_a_gone_owner_are_removed():
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no Docker engine here: {str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}")
    images = client.images.list()
    if not images:
        pytest.skip("the Docker engine has no image to create a container from (none can be pulled here)")
    pid, ticks = dead_owner()
    base = {docker_launcher.LABEL_RUN: "1", docker_launcher.LABEL_RUNTIME: "fake"}
    orphan = client.containers.create(images[0].id, command=["true"], labels={
        **base, **docker_launcher._owner_labels(), docker_launcher.LABEL_OWNER_PID: str(pid),
        docker_launcher.LABEL_OWNER_TICKS: str(ticks)})
    ours = client.containers.create(images[0].id, command=["true"], labels={**base, **docker_launcher._owner_labels()})
    try:
        assert docker_launcher.remove_orphan_containers(client) >= 1
        ids = {c.id for c in client.containers.list(all=True)}
        assert orphan.id not in ids and ours.id in ids
    finally:
        for c in (orphan, ours):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001
                pass
