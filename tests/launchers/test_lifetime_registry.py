"""The process-wide registry of runtimes: stops them all, runs the launchers' cleanups, holds
signals while a runtime is being created. (tests/launchers/test_lifetime.py kills real suites.)"""

from __future__ import annotations

import os
import signal

import pytest

from suite.lifetime import Registry


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
