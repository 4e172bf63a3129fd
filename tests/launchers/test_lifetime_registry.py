"""The process-wide registry of runtimes: stops them all, runs the launchers' cleanups, holds
signals while a runtime is being created. (tests/launchers/test_lifetime.py kills real suites.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from suite.lifetime import SIGNALS, Registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def signal_handlers_restored() -> Iterator[None]:
    """Every test here may rebind the four signals a Registry handles: all four are put back."""
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class Fake:
    def __init__(self, log: list[str], name: str, fail: bool = False):
        self.log, self.name, self.fail = log, name, fail

    def kill(self) -> None:
        self.log.append(f"kill {self.name}")
        if self.fail:
            raise RuntimeError("already gone")


def test_stop_all_kills_every_live_runtime_then_runs_the_cleanups_even_when_one_fails() -> None:
    log: list[str] = []
    reg = Registry()
    a, b, c = Fake(log, "a", fail=True), Fake(log, "b"), Fake(log, "c")
    for rt in (a, b, c):
        reg.add(rt)
    reg.discard(c)  # stopped on its own: not killed again
    reg.on_exit(lambda: log.append("cleanup"))
    reg.stop_all()
    assert sorted(log[:2]) == ["kill a", "kill b"] and log[2:] == ["cleanup"]
    assert set(reg.live(Fake)) == {a, b}  # killing does not forget them: a runtime's own stop() does


def test_a_cleanup_is_added_once() -> None:
    log: list[str] = []
    reg = Registry()

    def cleanup() -> None:
        log.append("x")

    reg.on_exit(cleanup)
    reg.on_exit(cleanup)
    reg.stop_all()
    assert log == ["x"]


def test_a_signal_during_creation_is_held_until_the_runtime_is_recorded() -> None:
    log: list[str] = []
    reg = Registry()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, lambda s, f: log.append("previous handler"))
        reg.install_signal_handlers()
        with reg.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            log.append("created")
            reg.add(Fake(log, "new"))
        # delivered after the block: the new runtime is killed, then the old handler runs
        assert log == ["created", "kill new", "previous handler"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_without_a_previous_handler_sigint_is_a_keyboard_interrupt() -> None:
    reg = Registry()
    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        reg.install_signal_handlers()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between two bytecodes of this thread
                pass
    finally:
        signal.signal(signal.SIGINT, previous)


_BEFORE_INSTALL: dict[int, object] = {}


def test_a_test_that_installs_the_handlers_and_leaves_them() -> None:
    """Installs the registry's handlers and does not put them back: the fixture must."""
    _BEFORE_INSTALL.update({signum: signal.getsignal(signum) for signum in SIGNALS})
    Registry().install_signal_handlers()
    assert all(signal.getsignal(signum) is not _BEFORE_INSTALL[signum] for signum in SIGNALS
               if _BEFORE_INSTALL[signum] is not signal.SIG_IGN)


def test_the_four_signals_are_restored_after_each_test() -> None:
    """The fixture above puts back what the test before this one rebound (whatever this process ran
    with before it: another test file may have started a runtime that installed them)."""
    assert _BEFORE_INSTALL, "runs after the test that installs the handlers"
    for signum in SIGNALS:
        assert signal.getsignal(signum) == _BEFORE_INSTALL[signum], signal.Signals(signum).name


def test_an_ignored_signal_stays_ignored() -> None:
    reg = Registry()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    reg.install_signal_handlers()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


HOST_TESTS = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from suite.lifetime import REGISTRY

    HERE = Path(__file__).parent

    class Owned:
        def kill(self):
            (HERE / "stopped").write_text("yes")

    def test_first():
        REGISTRY.install_signal_handlers()  # what a launcher's first start does
        REGISTRY.add(Owned())
        (HERE / "ready").write_text("yes")
        time.sleep(60)

    def test_second():
        (HERE / "second").write_text("ran")
        time.sleep(60)
""")


def run_host_and_sigterm(tmp_path: Path) -> tuple[int, float]:
    """A real pytest process whose first test installs the suite's handlers, sent SIGTERM while in
    it: its exit status and how long it took to end after the signal."""
    (tmp_path / "test_host.py").write_text(HOST_TESTS)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                             "test_host.py"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "the host test run ended before its first test"
            time.sleep(0.05)
        assert (tmp_path / "ready").exists(), "the host test run never reached its first test"
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = 0
        return rc, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_sigterm_stops_a_test_run_that_installed_the_handlers(tmp_path: Path) -> None:
    """The handler stops what it owns, then SIGTERM ends the process as SIGTERM: the host test
    runner does not record one failure and go on to the next test."""
    rc, took = run_host_and_sigterm(tmp_path)
    assert (tmp_path / "stopped").exists(), "what the registry owned was not stopped first"
    assert not (tmp_path / "second").exists(), "the test run went on after SIGTERM"
    assert rc == -signal.SIGTERM and took < 10, (rc, took)
